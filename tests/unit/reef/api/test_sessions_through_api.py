"""Claude Code's captured requests through the app ``reef serve`` builds (in process, the
scripted provider on a loopback socket): the records carry the session the CLI's header
names and the side call's kind, and the session processor binds the turn from them;
with ``agent_session_headers`` off the same requests are matched by transcript; a
captured ``/compact`` is recorded as side calls and the session goes on after it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reef.api.context import AppContext
from reef.core.events import InferenceRecorded, TurnCompleted
from reef.core.sessions import SessionProcessor
from reef.core.state import DictState
from reef.core.topics import INFERENCE
from reef.settings import Settings
from reef.testing.scripted_upstream import make_app
from tests.support.in_process import reef_api, serving

RUN = Path(__file__).resolve().parents[3] / "fixtures" / "agents" / "claude_code" / "interactive"
REQUESTS = ("side_02_post_v1_messages", "first_request", "tool_result_request")
#: set by the test client or the server, not by the CLI: left out of the replay
NOT_REPLAYED = {"host", "content-length", "connection", "accept-encoding", "x-api-key"}
SCENARIO = "agent-capture"


@pytest.fixture
async def upstream_url() -> AsyncIterator[str]:
    async with serving(make_app()) as url:
        yield f"{url}/v1"


def settings(tmp_path: Path, url: str, **extra: Any) -> Settings:
    return Settings.of(
        state_dir=tmp_path / "state",
        upstream_url=url,
        upstream_dialect="anthropic",
        insecure=True,
        track_sessions=True,
        fingerprint_secret="test-secret",
        **extra,
    )


def captured(name: str, run: Path = RUN) -> tuple[str, list[tuple[str, str]], bytes]:
    head = json.loads((run / f"{name}.headers.json").read_text())
    headers = [(k, v) for k, v in head["headers"] if k.lower() not in NOT_REPLAYED]
    return head["path"], headers, (run / f"{name}.json").read_bytes()


async def replayed(
    settings: Settings, run: Path = RUN, names: tuple[str, ...] = REQUESTS
) -> list[InferenceRecorded]:
    """The captured requests sent in order; the records the API appended."""
    async with reef_api(settings) as (client, ctx):
        for name in names:
            path, headers, body = captured(name, run)
            answer = await client.post(path, content=body, headers=headers)
            assert answer.status_code == 200, (name, answer.text)
        return await records(ctx)


async def records(ctx: AppContext) -> list[InferenceRecorded]:
    ends = await ctx.store.log.end_offsets(INFERENCE)
    return [
        s.event
        async for s in ctx.store.read(INFERENCE, until=ends)
        if isinstance(s.event, InferenceRecorded)
    ]


def turns(recorded: list[InferenceRecorded]) -> tuple[list[TurnCompleted], DictState]:
    proc, state = SessionProcessor(), DictState()
    out = [o for event in recorded for o in proc.step(state, event)]
    return [o for o in out if isinstance(o, TurnCompleted)], state


async def test_the_clis_session_header_names_the_session_its_records_bind_in(
    tmp_path: Path, upstream_url: str
) -> None:
    recorded = await replayed(settings(tmp_path, upstream_url))
    title, first, after = recorded
    session = dict(captured("first_request")[1])["x-claude-code-session-id"]
    assert all(r.tags["session"] == session for r in recorded)
    assert all(r.tags["session-source"] == "claude-code" for r in recorded)
    assert (title.tags["turn-type"], title.tags["side-kind"]) == ("side", "title")
    assert "turn-type" not in first.tags and "turn-type" not in after.tags
    (done,), state = turns(recorded)
    assert (done.receipt_id, done.next_receipt_id) == (first.event_id, after.event_id)
    assert (done.matched_by, done.session_tag, done.next_state_role) == ("tag", session, "tool")
    assert state.get(f"fate/{title.event_id}") == {"side": "title"}


async def test_with_agent_headers_ignored_the_same_requests_match_by_transcript(
    tmp_path: Path, upstream_url: str
) -> None:
    recorded = await replayed(settings(tmp_path, upstream_url, agent_session_headers=False))
    assert not [r for r in recorded if "session" in r.tags]
    title, first, after = recorded
    (done,), state = turns(recorded)
    assert (done.receipt_id, done.next_receipt_id) == (first.event_id, after.event_id)
    assert (done.matched_by, done.session_tag) == ("transcript", None)
    assert state.get(f"fate/{title.event_id}") == {"side": "title"}


COMPACTION = RUN.parents[2] / "agent_sessions" / "claude_code_compaction"


async def test_a_captured_compaction_through_the_api_keeps_the_session(
    tmp_path: Path, upstream_url: str
) -> None:
    names = sorted(
        p.name.removesuffix(".json")
        for p in COMPACTION.glob("*.json")
        if not p.name.endswith(".headers.json")
    )
    recorded = await replayed(settings(tmp_path, upstream_url), COMPACTION, tuple(names))
    first, after_tool, *compactions, after = recorded
    assert {r.tags.get("side-kind") for r in compactions} == {"compaction"}
    assert after.tags["history"] == "compacted"
    done, again = turns(recorded)[0]
    assert (done.receipt_id, done.next_receipt_id) == (first.event_id, after_tool.event_id)
    assert (again.receipt_id, again.next_receipt_id) == (after_tool.event_id, after.event_id)
    assert again.session_id == first.event_id and again.turn_index == 1
