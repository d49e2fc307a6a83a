"""Request size on the inference routes, in process: the default limit is the providers'
(Anthropic accepts 32 MB), so a request of several MiB is relayed byte for byte and
recorded whole, and one over the limit is refused with 413 in the route's dialect."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.api.context import AppContext
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.settings import Settings, field_info
from reef.testing.scripted_upstream import ScriptedUpstream, make_app
from tests.support.in_process import reef_api, serving

MIB = 1024 * 1024
HEADERS = {"x-reef-scenario": "big", "content-type": "application/json"}


def messages_request(size: int) -> bytes:
    """An Anthropic request of ``size`` bytes: a long system prompt, then a short turn."""
    head = b'{"model":"claude-test","max_tokens":16,"system":"'
    tail = b'","messages":[{"role":"user","content":"Return exactly: read it all"}]}'
    filler = b"def f(x):\\n    return x  # a file the agent read\\n" * (size // 48 + 1)
    body = head + filler[: size - len(head) - len(tail)] + tail
    assert len(body) == size
    return body


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[ScriptedUpstream, str]]:
    app = make_app(history=4)
    async with serving(app) as url:
        yield app, f"{url}/v1"


async def _records(ctx: AppContext) -> list[InferenceRecorded]:
    ends = await ctx.store.log.end_offsets(INFERENCE)
    return [
        s.event
        async for s in ctx.store.read(INFERENCE, until=ends)
        if isinstance(s.event, InferenceRecorded)
    ]


def test_the_default_limit_is_the_providers() -> None:
    assert field_info("max_body_bytes").default == 32 * MIB


async def test_a_nine_mib_request_is_relayed_and_recorded_whole(
    tmp_path: Path, scripted: tuple[ScriptedUpstream, str]
) -> None:
    upstream, url = scripted
    body = messages_request(9 * MIB)
    settings = Settings.of(state_dir=tmp_path / "state", upstream_url=url, insecure=True)
    async with reef_api(settings) as (client, ctx):
        answer = await client.post("/v1/messages", content=body, headers=HEADERS)
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["content"][0]["text"] == "read it all"
        receipt = answer.headers["x-reef-agent-record-id"]
        assert upstream.recent[-1][4] == body
        (record,) = await _records(ctx)
    assert record.event_id == receipt
    assert record.request_json == body.decode()
    assert record.response_json is not None
    assert json.loads(record.response_json)["content"][0]["text"] == "read it all"


@pytest.mark.parametrize(
    ("route", "shape"),
    [
        ("/v1/messages", {"type": "error", "error": {"type": "request_too_large"}}),
        ("/v1/chat/completions", {"error": {"code": "body_too_large"}}),
    ],
)
async def test_a_request_over_32_mib_is_refused_in_the_routes_dialect(
    tmp_path: Path, scripted: tuple[ScriptedUpstream, str], route: str, shape: dict[str, object]
) -> None:
    upstream, url = scripted
    settings = Settings.of(state_dir=tmp_path / "state", upstream_url=url, insecure=True)
    async with reef_api(settings) as (client, ctx):
        answer = await client.post(route, content=messages_request(33 * MIB), headers=HEADERS)
        assert answer.status_code == 413
        error = answer.json()
        assert error.keys() == shape.keys()
        inner = shape["error"]
        assert isinstance(inner, dict)
        assert {k: error["error"][k] for k in inner} == inner
        assert "33554432" in error["error"]["message"]
        assert not upstream.recent
        assert await _records(ctx) == []
