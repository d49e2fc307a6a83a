"""Session merging on sealed records: the join compares the fingerprints the API records
beside sealed bodies, never the bodies.

Pure (the join over sealed records built here) and in process (the app ``reef serve``
builds records a three-turn conversation against the scripted provider, sealed as always;
the join, replayed over that log, merges the turns a report on the last one quotes).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reef.core import fingerprints
from reef.core.events import Event, InferenceRecorded, SampleJoined
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.state import DictState
from reef.services.replay import ordered_events
from reef.settings import Settings
from reef.testing.scripted_upstream import make_app
from reef_dev.events import chat_request, chat_response, receipt, report
from tests.support.in_process import reef_api, serving
from tests.support.join import at, fresh, only

S = "demo"
KEY = fingerprints.scenario_key(b"secret", S)
U1 = {"role": "user", "content": "plan a trip"}
A1 = {"role": "assistant", "content": "where to?"}
U2 = {"role": "user", "content": [{"type": "text", "text": "Lisbon"}]}


def sealed(rec: str, seconds: float, request: Any, answer: str) -> InferenceRecorded:
    """A record as the API appends it: bodies sealed (none here), fingerprints beside."""
    return InferenceRecorded(
        event_id=rec,
        scenario=S,
        occurred_at=at(seconds),
        producer="test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="rel-a",
        stream=False,
        status=200,
        complete=True,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        sealed=True,
        message_fingerprints=fingerprints.request_fingerprints(KEY, request),
        answer_fingerprint=fingerprints.answer_fingerprint(KEY, chat_response(answer)),
    )


def test_sealed_turns_merge_by_their_fingerprints() -> None:
    join, state = fresh(merge_sessions=True)
    first, second = receipt(S, 1), receipt(S, 2)
    join.step(state, sealed(first, 0, chat_request([U1]), "where to?"))
    join.step(state, sealed(receipt(S, 9), 1, chat_request([U2]), "ok"))  # unrelated
    join.step(state, sealed(second, 2, chat_request([U1, A1, U2]), "when?"))
    sample = only(join.step(state, report(S, "r1", [second], at(10))))
    assert isinstance(sample, SampleJoined)
    assert sample.references == [first, second]


def test_sealed_turns_without_fingerprints_stay_apart() -> None:
    join, state = fresh(merge_sessions=True)
    first, second = receipt(S, 1), receipt(S, 2)
    bare = [
        sealed(first, 0, chat_request([U1]), "where to?"),
        sealed(second, 2, chat_request([U1, A1, U2]), "when?"),
    ]
    for event in bare:
        join.step(state, dataclasses.replace(event, message_fingerprints=None))
    sample = only(join.step(state, report(S, "r1", [second], at(10))))
    assert isinstance(sample, SampleJoined) and sample.references == [second]


def test_a_different_secret_links_nothing() -> None:
    """Fingerprints under another key are other strings: nothing continues across keys."""
    join, state = fresh(merge_sessions=True)
    first, second = receipt(S, 1), receipt(S, 2)
    join.step(state, sealed(first, 0, chat_request([U1]), "where to?"))
    other = fingerprints.scenario_key(b"another", S)
    later = dataclasses.replace(
        sealed(second, 2, chat_request([U1, A1, U2]), "when?"),
        message_fingerprints=fingerprints.request_fingerprints(other, chat_request([U1, A1, U2])),
    )
    join.step(state, later)
    sample = only(join.step(state, report(S, "r1", [second], at(10))))
    assert isinstance(sample, SampleJoined) and sample.references == [second]


# -- through the app -------------------------------------------------------------------


@pytest.fixture
async def upstream_url() -> AsyncIterator[str]:
    async with serving(make_app()) as url:
        yield f"{url}/v1"


async def conversation(settings: Settings) -> tuple[list[str], list[Event]]:
    """Three turns, each quoting the answers before it, and a report on the last: the
    receipts, and the join's inputs as the processors read them (sealed)."""
    receipts: list[str] = []
    messages: list[dict[str, Any]] = []
    async with reef_api(settings) as (client, ctx):
        for text in ("plan a trip", "Lisbon", "in May"):
            messages.append({"role": "user", "content": text})
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": messages},
                headers={"x-reef-scenario": S},
            )
            assert answer.status_code == 200, answer.text
            receipts.append(answer.headers["x-reef-agent-record-id"])
            messages.append(answer.json()["choices"][0]["message"])
        posted = await client.post(
            "/reef/report",
            json={"score": 1.0, "references": [receipts[-1]]},
            headers={"x-reef-scenario": S},
        )
        assert posted.status_code == 200, posted.text
        return receipts, await ordered_events(ctx.store, JoinProcessor.inputs)


def joined(events: list[Event]) -> SampleJoined:
    join, state = JoinProcessor(JoinSettings(merge_sessions=True)), DictState()
    (sample,) = [o for event in events for o in join.step(state, event)]
    assert isinstance(sample, SampleJoined), sample
    return sample


async def test_merge_sessions_joins_the_conversation_the_api_recorded_sealed(
    tmp_path: Path, upstream_url: str
) -> None:
    settings = Settings.of(
        state_dir=tmp_path / "state",
        upstream_url=upstream_url,
        insecure=True,
        merge_sessions=True,
        fingerprint_secret="test-secret",
    )
    receipts, events = await conversation(settings)
    records = [e for e in events if isinstance(e, InferenceRecorded)]
    assert len(records) == 3 and all(r.sealed and r.request_json is None for r in records)
    sample = joined(events)
    assert sample.references == receipts
    assert [json.loads(sample.trajectory_json)[i]["receipt"] for i in range(3)] == receipts


async def test_without_merging_the_api_records_no_fingerprints(
    tmp_path: Path, upstream_url: str
) -> None:
    """Off (the default), nothing is fingerprinted: a join told to merge has nothing to
    compare and joins the quoted exchange alone."""
    settings = Settings.of(state_dir=tmp_path / "state", upstream_url=upstream_url, insecure=True)
    receipts, events = await conversation(settings)
    records = [e for e in events if isinstance(e, InferenceRecorded)]
    assert all(r.message_fingerprints is None for r in records)
    assert joined(events).references == receipts[-1:]
