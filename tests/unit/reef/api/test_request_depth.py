"""Nesting depth on the inference routes, in process, through the whole serving path: a
request nested as deep as the API accepts (``MAX_DEPTH``, arrays or objects, in a field
the provider passes through) is relayed, sealed into the body store and recorded; one
level deeper is refused with 400 before anything is recorded. Every layer a body travels
through (the parser, the body store's manifest, its serializer) must hold the deepest
body the API accepts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.api.context import AppContext
from reef.api.inputs import MAX_DEPTH
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.settings import Settings
from reef.testing.scripted_upstream import ScriptedUpstream, make_app
from tests.support.in_process import reef_api, serving

HEADERS = {"x-reef-scenario": "deep", "content-type": "application/json"}


def nested_request(depth: int, shape: str) -> bytes:
    """A chat completion whose whole body is ``depth`` levels deep: the object itself,
    then its ``extra`` field nested ``depth - 1`` levels (arrays or objects)."""
    inner = depth - 1
    if shape == "arrays":
        nested = "[" * inner + "]" * inner
    else:
        nested = '{"a":' * (inner - 1) + "{}" + "}" * (inner - 1)
    head = '{"model":"gpt-test","messages":[{"role":"user","content":"Return exactly: deep"}]'
    return f'{head},"extra":{nested}}}'.encode()


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


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


@pytest.mark.parametrize("shape", ["arrays", "objects"])
async def test_the_deepest_accepted_request_is_recorded_and_one_level_more_refused(
    tmp_path: Path, scripted: tuple[ScriptedUpstream, str], shape: str
) -> None:
    _, url = scripted
    deepest, deeper = nested_request(MAX_DEPTH, shape), nested_request(MAX_DEPTH + 1, shape)
    assert depth_of(json.loads(deepest)) == MAX_DEPTH
    settings = Settings.of(state_dir=tmp_path / "state", upstream_url=url, insecure=True)
    async with reef_api(settings) as (client, ctx):
        refused = await client.post("/v1/chat/completions", content=deeper, headers=HEADERS)
        assert refused.status_code == 400, refused.text[:300]
        assert "nested deeper" in refused.json()["error"]["message"]
        assert await _records(ctx) == []
        answer = await client.post("/v1/chat/completions", content=deepest, headers=HEADERS)
        assert answer.status_code == 200, answer.text[:300]
        (record,) = await _records(ctx)
    assert record.event_id == answer.headers["x-reef-agent-record-id"]
    assert record.request_json is not None
    assert json.loads(record.request_json) == json.loads(deepest)
