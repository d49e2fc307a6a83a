"""Sessions from what the real agent CLIs sent: their captured requests, tagged from
their captured headers and bodies as the API tags them (reef.api.tags), through the pure
session processor.

tests/fixtures/agents holds one scripted turn per CLI (a tool call, then its result) and
Claude Code's session-title request; tests/fixtures/agent_sessions a Claude Code run of
a subagent and one of ``/compact``. Codex was not driven to compact or to spawn a
subagent, and the Claude Code variations (a subagent beside a compaction in one session)
are built from the captured requests to the agents' shapes: a compaction is the captured
history plus the summary instruction (Claude Code) or the same request with turn
metadata ``request_kind: compaction`` (Codex); the history after it is the captured
system prompt with a summary; a subagent's request carries the captured headers (Claude
Code) or a thread of its own naming its parent thread (Codex) with another task.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reef.api.tags import tags_from
from reef.core import fingerprints
from reef.core.events import Event, InferenceRecorded, TurnCompleted
from reef.core.state import DictState
from tests.support.sessions import KEY, fresh

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "agents"
CLAUDE_RUNS = ("claude_code/quiet", "claude_code/defaults", "claude_code/interactive")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SUMMARY_ASK = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)


def captured(run: str | Path, name: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(path, body, headers by lowercase name) of one captured request of ``run`` (a
    folder under tests/fixtures/agents, or a path)."""
    folder = run if isinstance(run, Path) else FIXTURES / run
    head = json.loads((folder / f"{name}.headers.json").read_text())
    body = json.loads((folder / f"{name}.json").read_bytes())
    headers = {name.lower(): value for name, value in head["headers"]}
    return head["path"], body, headers


def recorded(
    rec: str, at: float, path: str, body: dict[str, Any], headers: dict[str, str]
) -> InferenceRecorded:
    """The record the API makes of this request (its tags as reef.api.tags derives them,
    fingerprints; no bodies)."""
    explicit = {
        k[len("x-reef-tag-") :]: v for k, v in headers.items() if k.startswith("x-reef-tag-")
    }
    tags = tags_from(headers, explicit, body, agent_sessions=True, classify=True)
    return InferenceRecorded(
        event_id=rec,
        scenario="demo",
        occurred_at=T0 + timedelta(seconds=at),
        producer="test",
        dialect="anthropic" if path.startswith("/v1/messages") else "openai",
        route=path,
        release_id="rel-a",
        stream=True,
        status=200,
        complete=True,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        tags=tags,
        sealed=True,
        message_fingerprints=fingerprints.request_fingerprints(KEY, body),
        has_tools=fingerprints.has_tools(body),
    )


def completed(events: list[Event]) -> TurnCompleted:
    assert len(events) == 1 and isinstance(events[0], TurnCompleted), events
    return events[0]


@pytest.mark.parametrize("run", CLAUDE_RUNS)
def test_a_claude_code_turn_binds_in_the_session_its_header_names(run: str) -> None:
    proc, state = fresh()
    path, first, headers = captured(run, "first_request")
    session = headers["x-claude-code-session-id"]
    assert proc.step(state, recorded("first", 0, path, first, headers)) == []
    if (FIXTURES / run / "side_02_post_v1_messages.json").exists():
        title = recorded("title", 1, *captured(run, "side_02_post_v1_messages"))
        assert (title.tags["session"], title.tags["side-kind"]) == (session, "title")
        assert proc.step(state, title) == []
        assert state.get("fate/title") == {"side": "title"}
    done = completed(proc.step(state, recorded("next", 2, *captured(run, "tool_result_request"))))
    assert (done.receipt_id, done.next_receipt_id, done.session_tag) == ("first", "next", session)
    assert (done.matched_by, done.next_state_role) == ("tag", "tool")


def test_claude_code_compacting_and_spawning_a_subagent_in_one_session() -> None:
    run = "claude_code/interactive"
    path, first, headers = captured(run, "first_request")
    _, after_tool, _ = captured(run, "tool_result_request")
    proc, state = fresh()
    proc.step(state, recorded("first", 0, path, first, headers))
    task = copy.deepcopy(first)
    task["system"] = [{"type": "text", "text": "You are a file search specialist."}]
    task["messages"] = [{"role": "user", "content": "Find where hello.txt is written."}]
    assert proc.step(state, recorded("sub", 1, path, task, headers)) == []
    main = completed(proc.step(state, recorded("next", 2, path, after_tool, headers)))
    assert (main.receipt_id, main.next_receipt_id, main.parent_receipt_id) == (
        "first",
        "next",
        None,
    )
    ask = copy.deepcopy(after_tool)
    ask["messages"].append({"role": "user", "content": [{"type": "text", "text": SUMMARY_ASK}]})
    compaction = recorded("compact", 3, path, ask, headers)
    assert compaction.tags["side-kind"] == "compaction" and compaction.has_tools
    assert proc.step(state, compaction) == []
    shortened = copy.deepcopy(first)
    shortened["messages"] = [{"role": "user", "content": "This session continues: a summary."}]
    done = completed(proc.step(state, recorded("after", 4, path, shortened, headers)))
    assert (done.receipt_id, done.next_receipt_id, done.turn_index) == ("next", "after", 1)
    found = [*task["messages"], {"role": "assistant", "content": "in work/"}]
    found.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}
    )
    sub = completed(
        proc.step(state, recorded("sub2", 5, path, {**task, "messages": found}, headers))
    )
    assert (sub.session_id, sub.parent_session_id, sub.parent_receipt_id) == (
        "sub",
        "first",
        "first",
    )


def test_codex_threads_and_compaction_from_its_turn_metadata() -> None:
    run = "codex/exec"
    path, first, headers = captured(run, "first_request")
    _, after_tool, after_headers = captured(run, "tool_result_request")
    root_thread = headers["thread-id"]
    proc, state = fresh()
    record = recorded("first", 0, path, first, headers)
    assert (record.tags["session"], record.tags["thread"]) == (headers["session-id"], root_thread)
    assert record.tags["session-source"] == "codex" and record.tags["request-kind"] == "turn"
    proc.step(state, record)
    child = {**headers, "thread-id": "child-thread", "x-codex-parent-thread-id": root_thread}
    spawned = copy.deepcopy(first)
    spawned["input"] = [{"type": "message", "role": "user", "content": "review hello.txt"}]
    assert proc.step(state, recorded("child", 1, path, spawned, child)) == []
    done = completed(proc.step(state, recorded("next", 2, path, after_tool, after_headers)))
    assert (done.receipt_id, done.next_receipt_id, done.session_id) == ("first", "next", "first")
    meta = json.loads(after_headers["x-codex-turn-metadata"]) | {"request_kind": "compaction"}
    compacting = {**after_headers, "x-codex-turn-metadata": json.dumps(meta)}
    assert proc.step(state, recorded("compact", 3, path, after_tool, compacting)) == []
    assert state.get("fate/compact") == {"side": "compaction"}
    again = copy.deepcopy(spawned)
    again["input"].append({"type": "message", "role": "user", "content": "and the tests"})
    sub = completed(proc.step(state, recorded("child2", 4, path, again, child)))
    assert (sub.session_id, sub.parent_session_id, sub.parent_receipt_id) == (
        "child",
        "first",
        "first",
    )


def test_the_captured_requests_replay_to_the_same_outputs_and_state() -> None:
    inputs = [
        recorded(f"{run}-{name}", n, *captured(run, name))
        for n, (run, name) in enumerate(
            (run, name)
            for run in (*CLAUDE_RUNS, "codex/exec")
            for name in ("first_request", "tool_result_request")
        )
    ]
    runs = []
    for _ in range(2):
        proc, state = fresh()
        runs.append(([o for e in inputs for o in proc.step(state, e)], state))
    (out_a, state_a), (out_b, state_b) = runs
    assert out_a == out_b and len(out_a) == 4
    assert isinstance(state_a, DictState) and state_a.data == state_b.data


SUBAGENT_RUN = FIXTURES.parent / "agent_sessions" / "claude_code_subagent"


def test_a_real_claude_code_subagent_is_a_session_linked_to_the_turn_that_ran_it() -> None:
    """Captured, not built: Claude Code ran its Agent tool (tests/fixtures/agent_sessions)."""
    bodies = [p for p in SUBAGENT_RUN.glob("*.json") if not p.name.endswith(".headers.json")]
    names = sorted(p.name.removesuffix(".json") for p in bodies)
    assert [n[3:] for n in names] == [
        "first_request",
        "subagent_first_request",
        "subagent_tool_result_request",
        "tool_result_request",
    ]
    events = [recorded(n[:2], i, *captured(SUBAGENT_RUN, n)) for i, n in enumerate(names)]
    main, sub, sub_next, main_next = events
    agent_id = sub.tags["thread"]
    assert sub_next.tags["thread"] == agent_id and "thread" not in main.tags
    assert sub.tags["subagent"] == "true" and "subagent" not in main_next.tags
    assert {e.tags["session"] for e in events} == {main.tags["session"]}
    proc, state = fresh()
    out = [proc.step(state, e) for e in events]
    assert out[0] == out[1] == []
    inner = completed(out[2])
    assert (inner.session_id, inner.receipt_id, inner.next_receipt_id) == ("02", "02", "03")
    assert (inner.parent_session_id, inner.parent_receipt_id) == ("01", "01")
    outer = completed(out[3])
    assert (outer.session_id, outer.receipt_id, outer.next_receipt_id) == ("01", "01", "04")
    assert outer.parent_receipt_id is None and outer.next_state_role == "tool"


COMPACTION_RUN = FIXTURES.parent / "agent_sessions" / "claude_code_compaction"


def test_a_real_claude_code_compaction_is_a_side_call_and_the_session_goes_on() -> None:
    """Captured, not built: ``/compact`` in a Claude Code session (tests/fixtures/agent_sessions).
    The history after it opens with the summary under a system prompt whose billing line
    changed, so only its ``history: compacted`` tag keeps it in the session."""
    bodies = [p for p in COMPACTION_RUN.glob("*.json") if not p.name.endswith(".headers.json")]
    names = sorted(p.name.removesuffix(".json") for p in bodies)
    events = [recorded(n[:2], i, *captured(COMPACTION_RUN, n)) for i, n in enumerate(names)]
    kinds = [e.tags.get("side-kind") for e in events]
    assert kinds[:2] == [None, None] and kinds[-1] is None
    assert set(kinds[2:-1]) == {"compaction"}  # the summary request (retried, at times)
    first, after = events[0], events[-1]
    assert after.tags["history"] == "compacted"
    assert first.message_fingerprints and after.message_fingerprints
    assert first.message_fingerprints[0] != after.message_fingerprints[0]  # another system
    proc, state = fresh()
    out = [proc.step(state, e) for e in events]
    assert completed(out[1]).receipt_id == "01"
    assert all(o == [] for o in out[2:-1])
    assert all(state.get(f"fate/{e.event_id}") == {"side": "compaction"} for e in events[2:-1])
    done = completed(out[-1])
    assert (done.session_id, done.receipt_id, done.next_receipt_id) == ("01", "02", after.event_id)
    assert done.turn_index == 1 and done.parent_receipt_id is None
