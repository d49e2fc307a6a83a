"""Prompt caching through Reef, in process: the provider gets the client's bytes and beta
headers, and each exchange's cache tokens and cost reach the record, ``/reef/status``,
``/metrics`` and ``reef export``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from reef.api.context import AppContext
from reef.api.raw_json import member_spans
from reef.cli import main
from reef.cli.status import render
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.settings import ModelPrice, Settings
from reef.testing.scripted_upstream import ScriptedUpstream, make_app
from tests.support.in_process import reef_api, serving

SCENARIO = "cache"
#: as a client might write it: its own spacing, key order, escapes and non-ASCII text
BODY = (
    b'{"model":"claude-test","max_tokens":64,\n'
    b' "system" : [ {"type":"text","text":"You are terse. Caf\xc3\xa9 \\u2014 r\\u00e8gles.",'
    b'"cache_control":{"type":"ephemeral"}} ],\n'
    b' "tools":[{"name":"lookup","description":"Look up \\"x\\"","input_schema":'
    b'{"type":"object","properties":{"q":{"type":"string"}}},'
    b'"cache_control":{"type":"ephemeral","ttl":"1h"}}],\n'
    b' "messages":[{"role":"user","content":[{"type":"text","text":"hi",'
    b'"cache_control":{"type":"ephemeral"}}]}]}'
)
BETAS = ("prompt-caching-2024-07-31", "extended-cache-ttl-2025-04-11")
PRICES = {
    "claude-test": ModelPrice(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0),
    "gpt-test": ModelPrice(input=2.5, cached_input=1.25, output=10.0),
}
ANTHROPIC_USAGE = {
    "input_tokens": 20,
    "cache_creation_input_tokens": 1000,
    "cache_read_input_tokens": 3000,
    "output_tokens": 10,
}
CHAT_USAGE = {
    "prompt_tokens": 4020,
    "completion_tokens": 10,
    "prompt_tokens_details": {"cached_tokens": 4000},
}


def _headers(*extra: tuple[str, str]) -> list[tuple[str, str]]:
    return [("x-reef-scenario", SCENARIO), ("content-type", "application/json"), *extra]


def _received(upstream: ScriptedUpstream) -> tuple[dict[str, list[str]], bytes]:
    """The last request the provider received: its headers (by name) and body bytes."""
    _, _, _, raw_headers, body = upstream.recent[-1]
    headers: dict[str, list[str]] = {}
    for name, value in raw_headers:
        headers.setdefault(name.decode("latin-1"), []).append(value.decode("latin-1"))
    return headers, body


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[ScriptedUpstream, str]]:
    app = make_app()
    async with serving(app) as url:
        yield app, f"{url}/v1"


def _settings(tmp_path: Path, upstream_url: str, **extra: Any) -> Settings:
    return Settings.of(
        state_dir=tmp_path / "state",
        upstream_url=upstream_url,
        upstream_dialect="anthropic",
        insecure=True,
        **extra,
    )


async def test_messages_reach_the_provider_byte_for_byte_with_the_beta_headers(
    tmp_path: Path, scripted: tuple[ScriptedUpstream, str]
) -> None:
    upstream, url = scripted
    async with reef_api(_settings(tmp_path, url)) as (client, _):
        # one header line per beta, as some clients send them
        lines = [("anthropic-beta", beta) for beta in BETAS]
        answer = await client.post("/v1/messages", content=BODY, headers=_headers(*lines))
        assert answer.status_code == 200, answer.text
        headers, body = _received(upstream)
        assert body == BODY
        assert headers["anthropic-beta"] == [", ".join(BETAS)]
        assert headers["anthropic-version"] == ["2023-06-01"]

        joined = ("anthropic-beta", ",".join(BETAS))  # the SDKs' one line, kept as sent
        version = ("anthropic-version", "2023-06-01")
        answer = await client.post("/v1/messages", content=BODY, headers=_headers(joined, version))
        assert answer.status_code == 200, answer.text
        headers, body = _received(upstream)
        assert body == BODY and headers["anthropic-beta"] == [",".join(BETAS)]


async def test_a_forced_model_leaves_system_and_tools_byte_for_byte(
    tmp_path: Path, scripted: tuple[ScriptedUpstream, str]
) -> None:
    upstream, url = scripted
    settings = _settings(tmp_path, url, upstream_model="forced-model")
    async with reef_api(settings) as (client, _):
        beta = ("anthropic-beta", BETAS[0])
        answer = await client.post("/v1/messages", content=BODY, headers=_headers(beta))
        assert answer.status_code == 200, answer.text
    headers, body = _received(upstream)
    assert orjson.loads(body)["model"] == "forced-model"
    sent, received = member_spans(BODY), member_spans(body)
    for key in ("system", "tools", "messages", "max_tokens"):
        assert body[slice(*received[key])] == BODY[slice(*sent[key])], key
    assert body == BODY.replace(b'"claude-test"', b'"forced-model"')
    assert headers["anthropic-beta"] == [BETAS[0]]


# -- cache tokens and cost on every surface ---------------------------------------------


async def _provider(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with fixed usage (cache reads and writes), buffered or streamed."""
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    request = json.loads(b"".join(chunks))
    if scope["path"] == "/v1/chat/completions":
        body = {
            "object": "chat.completion",
            "model": request["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": CHAT_USAGE,
        }
        await _send(send, "application/json", json.dumps(body).encode())
    elif request.get("stream"):
        start = {"usage": {**ANTHROPIC_USAGE, "output_tokens": 1}, "content": []}
        events = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_delta",
                {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "ok"}},
            ),
            ("message_delta", {"type": "message_delta", "usage": {"output_tokens": 10}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        frames = b"".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
        )
        await _send(send, "text/event-stream", frames)
    else:
        body = {
            "type": "message",
            "role": "assistant",
            "model": request["model"],
            "content": [{"type": "text", "text": "ok"}],
            "usage": ANTHROPIC_USAGE,
        }
        await _send(send, "application/json", json.dumps(body).encode())


async def _send(send: Any, content_type: str, body: bytes) -> None:
    headers = [(b"content-type", content_type.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _anthropic_cost() -> float:
    return (20 * 3.0 + 3000 * 0.3 + 1000 * 3.75 + 10 * 15.0) / 1e6


def _chat_cost() -> float:
    return (20 * 2.5 + 4000 * 1.25 + 10 * 10.0) / 1e6


async def _exchanges(client: httpx.AsyncClient) -> None:
    """Buffered and streamed messages, a priced chat and a chat of an unpriced model."""
    message = orjson.loads(BODY)
    for body in (message, {**message, "stream": True}):
        async with client.stream("POST", "/v1/messages", json=body, headers=_headers()) as answer:
            assert answer.status_code == 200, await answer.aread()
            await answer.aread()
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    for model in ("gpt-test", "gpt-unpriced"):
        answer = await client.post(
            "/v1/chat/completions", json={**chat, "model": model}, headers=_headers()
        )
        assert answer.status_code == 200, answer.text


async def _settled(ctx: AppContext, exchanges: int) -> None:
    state = ctx.projection.state
    reached = await ctx.projection.wait_until(
        lambda s: s.spend.scenario(SCENARIO).exchanges >= exchanges, 10.0
    )
    assert reached, state.spend.scenario(SCENARIO)


@pytest.fixture
async def priced(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, AppContext]]:
    async with serving(_provider) as url:
        settings = _settings(tmp_path, f"{url}/v1", prices=PRICES)
        async with reef_api(settings) as (client, ctx):
            await _exchanges(client)
            await _settled(ctx, 4)
            yield client, ctx


async def _records(ctx: AppContext) -> list[InferenceRecorded]:
    ends = await ctx.store.log.end_offsets(INFERENCE)
    return [
        s.event
        async for s in ctx.store.read(INFERENCE, until=ends)
        if isinstance(s.event, InferenceRecorded)
    ]


async def test_each_record_holds_its_cache_tokens_and_cost(
    priced: tuple[httpx.AsyncClient, AppContext],
) -> None:
    _, ctx = priced
    records = await _records(ctx)
    seen = [
        (
            r.route,
            r.stream,
            r.input_tokens,
            r.cache_read_input_tokens,
            r.cache_creation_input_tokens,
            r.output_tokens,
        )
        for r in records
    ]
    assert seen == [
        ("/v1/messages", False, 20, 3000, 1000, 10),
        ("/v1/messages", True, 20, 3000, 1000, 10),
        ("/v1/chat/completions", False, 4020, 4000, None, 10),
        ("/v1/chat/completions", False, 4020, 4000, None, 10),
    ]
    costs = [r.cost_usd for r in records]
    assert costs[:3] == pytest.approx([_anthropic_cost(), _anthropic_cost(), _chat_cost()])
    assert costs[3] is None  # gpt-unpriced is not in the table


async def test_status_shows_tokens_and_cost_per_scenario_and_release(
    priced: tuple[httpx.AsyncClient, AppContext],
) -> None:
    client, ctx = priced
    answer = await client.get("/reef/status")
    assert answer.status_code == 200, answer.text
    spend = answer.json()["scenarios"][SCENARIO]["spend"]
    head = ctx.projection.state.scenarios[SCENARIO].head
    expected = {
        "exchanges": 4,
        "metered": 4,
        "priced": 3,
        "uncached_input_tokens": 20 + 20 + 20 + 20,
        "cache_read_tokens": 2 * 3000 + 2 * 4000,
        "cache_write_tokens": 2 * 1000,
        "output_tokens": 40,
    }
    assert {k: spend[k] for k in expected} == expected
    assert spend["cost_usd"] == pytest.approx(2 * _anthropic_cost() + _chat_cost())
    assert list(spend["releases"]) == [head]
    assert spend["releases"][head]["cost_usd"] == pytest.approx(spend["cost_usd"])
    console = Console(record=True, width=160)
    render(answer.json(), console)  # reef status
    text = console.export_text()
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()]
    cost = f"{spend['cost_usd']:.6f}"
    assert [SCENARIO, head[:16], "3/4", "80", "14000", "2000", "40", cost] in rows, text


async def test_metrics_show_tokens_and_cost_per_scenario_and_release(
    priced: tuple[httpx.AsyncClient, AppContext],
) -> None:
    client, ctx = priced
    text = (await client.get("/metrics")).text
    head = ctx.projection.state.scenarios[SCENARIO].head
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float:
        key = (name, tuple(sorted({"scenario": SCENARIO, "release": head, **labels}.items())))
        assert key in samples, f"{key} not in:\n{text}"
        return samples[key]

    assert value("reef_cost_usd_total") == pytest.approx(2 * _anthropic_cost() + _chat_cost())
    assert value("reef_tokens_total", kind="cache_read") == 2 * 3000 + 2 * 4000
    assert value("reef_tokens_total", kind="cache_write") == 2 * 1000
    assert value("reef_tokens_total", kind="uncached_input") == 80
    assert value("reef_tokens_total", kind="output") == 40
    assert value("reef_exchanges_unpriced_total") == 1


async def test_without_a_price_table_no_spend_is_shown(tmp_path: Path) -> None:
    async with (
        serving(_provider) as url,
        reef_api(_settings(tmp_path, f"{url}/v1")) as (client, ctx),
    ):
        await _exchanges(client)
        assert [r.cost_usd for r in await _records(ctx)] == [None] * 4
        status = (await client.get("/reef/status")).json()
        assert "spend" not in status["scenarios"][SCENARIO]
        assert "reef_cost_usd" not in (await client.get("/metrics")).text


async def test_export_has_the_cache_tokens_and_cost(tmp_path: Path) -> None:
    async with serving(_provider) as url:
        settings = _settings(tmp_path, f"{url}/v1", prices=PRICES)
        async with reef_api(settings) as (client, _):
            await _exchanges(client)
    output = tmp_path / "inference.jsonl"
    result = await asyncio.to_thread(  # the command runs its own event loop
        CliRunner().invoke,
        main,
        [
            "export",
            "--topic",
            INFERENCE,
            "--log",
            "embedded",
            "--state-dir",
            str(settings.deployment.state_dir),
            "-o",
            str(output),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    got = [
        (r["cache_read_input_tokens"], r["cache_creation_input_tokens"], r["cost_usd"])
        for r in rows
    ]
    assert got == [
        (3000, 1000, pytest.approx(_anthropic_cost())),
        (3000, 1000, pytest.approx(_anthropic_cost())),
        (4000, None, pytest.approx(_chat_cost())),
        (4000, None, None),
    ]
