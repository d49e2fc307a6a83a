"""The shadow copies of one API process (reef.api.shadow) over a real embedded log, a
real content store and a real loopback provider: what a copy sends and records, a failed
copy recorded incomplete against the candidate, the bound on copies in flight, and a
close that cancels what outlives its grace."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reef.api.adapters import AdapterKinds
from reef.api.background import BackgroundTasks
from reef.api.context import AppContext
from reef.api.processor_watch import ProcessorWatch
from reef.api.rereading import RecentRequests
from reef.api.shadow import ShadowCopies, ShadowRequest
from reef.api.upstream import Upstream
from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import InferenceRecorded
from reef.core.shadow import shadow_receipt
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.settings import Settings
from reef.testing.servers import dead_url
from reef_dev.events import receipt

SCENARIO = "shop"
CANDIDATE = "c" * 32
HEAD = "h" * 32
PROMPT = "You are the candidate."


async def _provider(seen: list[dict[str, Any]]) -> TestServer:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append({"body": body, "release": request.headers.get("x-reef-serve-release")})
        if body["messages"][-1]["content"] == "slow":
            await asyncio.sleep(30)
        answer = {"role": "assistant", "content": "from the candidate"}
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        # an engine answers from the slot it holds; without one, from its head weights
        slot = request.headers.get("x-reef-serve-release")
        version = slot if body["messages"][-1]["content"] != "no slot" else HEAD
        return web.json_response(
            {"choices": [{"message": answer}], "usage": usage},
            headers={"x-weight-version": version or HEAD},
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.fixture
async def provider() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    server = await _provider(seen)
    try:
        yield str(server.make_url("/v1")), seen
    finally:
        await server.close()


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    opened = EmbeddedLog(tmp_path / "log.sqlite3")
    await opened.start()
    await opened.ensure_topics(list(topics.ALL_TOPICS))
    try:
        yield opened
    finally:
        await opened.close()


def context(
    tmp_path: Path,
    log: EmbeddedLog,
    upstream_url: str,
    candidate: dict[str, bytes | str] | None = None,
) -> AppContext:
    """A context with the candidate a harness release whose system prompt is PROMPT
    (or a release of the ``candidate`` files)."""
    settings = Settings.of(upstream_url=upstream_url, upstream_read_timeout_s=60.0)
    content = ContentStore(LocalArtifactStore(tmp_path / "artifacts"))
    content_id = content.publish_files(candidate or {"system_prompt.md": PROMPT})
    releases = [
        SimpleNamespace(release_id=HEAD, content_id=content.publish_files({})),
        SimpleNamespace(release_id=CANDIDATE, content_id=content_id),
    ]
    projection = SimpleNamespace(
        state=SimpleNamespace(scenarios={SCENARIO: SimpleNamespace(releases=releases)})
    )
    store = EventStore(log)
    return AppContext(
        settings,
        "test",
        store,
        cast(Any, projection),
        Upstream(settings.upstream, settings.recording),
        None,
        content=content,
        processors=ProcessorWatch(log, "embedded"),
        background=BackgroundTasks(),
        shadows=ShadowCopies(),
        adapters=AdapterKinds(content),
        requests=RecentRequests(),
    )


def copy_request(n: int, text: str = "hello") -> ShadowRequest:
    return ShadowRequest(
        served_receipt=receipt(SCENARIO, n),
        scenario=SCENARIO,
        route="/v1/chat/completions",
        dialect="openai",
        candidate_release_id=CANDIDATE,
        body={"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]},
        headers={},
        tags={"session": "s1"},
        model="m",
    )


async def recorded(store: EventStore) -> list[InferenceRecorded]:
    return [
        s.event
        async for s in store.read(topics.INFERENCE)
        if isinstance(s.event, InferenceRecorded)
    ]


async def settled(copies: ShadowCopies) -> None:
    while copies.in_flight:
        await asyncio.sleep(0.01)


async def test_a_copy_sends_the_candidates_prompt_and_records_its_answer_linked(
    tmp_path: Path, log: EmbeddedLog, provider: tuple[str, list[dict[str, Any]]]
) -> None:
    url, seen = provider
    ctx = context(tmp_path, log, url)
    copies = ShadowCopies()
    try:
        copies.start(ctx, copy_request(1))
        await settled(copies)
    finally:
        await ctx.upstream.aclose()
    ((sent,),) = [seen]
    assert sent["release"] == CANDIDATE and sent["body"]["stream"] is False
    assert sent["body"]["messages"][0] == {"role": "system", "content": PROMPT}
    assert "lora_path" not in sent["body"]  # not an adapter release
    (record,) = await recorded(ctx.store)
    assert record.event_id == shadow_receipt(receipt(SCENARIO, 1))
    assert (record.shadow_of, record.release_id) == (receipt(SCENARIO, 1), CANDIDATE)
    assert (record.complete, record.status, record.stream) == (True, 200, False)
    assert json.loads(record.request_json or "{}") == sent["body"]
    assert "from the candidate" in (record.response_json or "")
    assert (record.served_release_id, record.weight_version) == (CANDIDATE, CANDIDATE)
    assert (record.input_tokens, record.output_tokens) == (3, 2)
    assert record.tags == {"session": "s1"} and copies.sent == 1


async def test_a_copy_names_an_adapter_candidate_in_sglangs_lora_path(
    tmp_path: Path, log: EmbeddedLog, provider: tuple[str, list[dict[str, Any]]]
) -> None:
    url, seen = provider
    adapter: dict[str, bytes | str] = {"adapter_config.json": "{}", "adapter_model.bin": b"w"}
    ctx = context(tmp_path, log, url, adapter)
    copies = ShadowCopies()
    try:
        copies.start(ctx, copy_request(2))
        await settled(copies)
    finally:
        await ctx.upstream.aclose()
    ((sent,),) = [seen]
    assert (sent["body"]["lora_path"], sent["release"]) == (CANDIDATE, CANDIDATE)
    (record,) = await recorded(ctx.store)
    assert json.loads(record.request_json or "{}") == sent["body"]


async def test_a_copy_an_engine_answered_without_the_candidates_slot_says_so(
    tmp_path: Path, log: EmbeddedLog, provider: tuple[str, list[dict[str, Any]]]
) -> None:
    url, _ = provider
    ctx = context(tmp_path, log, url)
    copies = ShadowCopies()
    try:
        copies.start(ctx, copy_request(3, "no slot"))
        await settled(copies)
    finally:
        await ctx.upstream.aclose()
    (record,) = await recorded(ctx.store)
    assert (record.release_id, record.served_release_id) == (CANDIDATE, HEAD)


async def test_a_copy_the_candidate_cannot_answer_is_recorded_incomplete(
    tmp_path: Path, log: EmbeddedLog
) -> None:
    ctx = context(tmp_path, log, dead_url())
    copies = ShadowCopies()
    try:
        copies.start(ctx, copy_request(2))
        await settled(copies)
    finally:
        await ctx.upstream.aclose()
    (record,) = await recorded(ctx.store)
    assert (record.complete, record.status, record.shadow_of) == (False, 502, receipt(SCENARIO, 2))
    assert record.error is not None and "shadow copy failed" in record.error


async def test_copies_beyond_the_bound_are_dropped_and_close_cancels_the_late_ones(
    tmp_path: Path, log: EmbeddedLog, provider: tuple[str, list[dict[str, Any]]]
) -> None:
    url, seen = provider
    ctx = context(tmp_path, log, url)
    copies = ShadowCopies(limit=2, grace_s=0.2)
    try:
        for n in range(3):
            copies.start(ctx, copy_request(n, "slow"))
        assert (copies.sent, copies.dropped, copies.in_flight) == (2, 1, 2)
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        await copies.close()
    finally:
        await ctx.upstream.aclose()
    assert copies.in_flight == 0
    assert await recorded(ctx.store) == []  # a cancelled copy records nothing
