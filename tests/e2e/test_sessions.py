"""Sessions end to end on the embedded log: ``reef serve`` with ``REEF_TRACK_SESSIONS``.

Through the HTTP API, an agent's turns (OpenAI, untagged: transcript resends) and a
tagged Anthropic session come out as ``TurnCompleted`` on ``reef.turns``; the recorded
exchanges carry the fingerprints the processor matched on (never the text), and a
client retry and a side call bind nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reef.core import fingerprints
from reef.core.events import InferenceRecorded, TurnCompleted
from reef.core.topics import TURNS
from reef.testing.servers import UpstreamProcess
from tests.support.api import unique_scenario
from tests.support.reef_server import ReefServer, launch

SECRET = "e2e-fingerprint-secret"
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
ANTHROPIC_TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]


@pytest.fixture(scope="module")
def servers(
    upstream: UpstreamProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ReefServer]]:
    env = {"REEF_TRACK_SESSIONS": "true", "REEF_FINGERPRINT_SECRET": SECRET}
    started = {
        dialect: launch(
            "embedded",
            upstream=upstream,
            dialect=dialect,
            state_dir=tmp_path_factory.mktemp(f"sessions-{dialect}"),
            env=env,
        )
        for dialect in ("openai", "anthropic")
    }
    yield started
    for server in started.values():
        server.stop()


def turns(server: ReefServer, scenario: str, count: int) -> list[TurnCompleted]:
    deadline = time.monotonic() + 10
    while True:
        found = [e for e in server.events(TURNS, scenario) if isinstance(e, TurnCompleted)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def post(client: httpx.Client, path: str, body: dict[str, Any], **headers: str) -> Any:
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"], response.json()


def test_openai_turns_are_matched_by_transcript_and_the_record_has_fingerprints(
    servers: dict[str, ReefServer],
) -> None:
    server, scenario = servers["openai"], unique_scenario("sessions")
    key = fingerprints.scenario_key(SECRET.encode(), scenario)
    with server.client(scenario) as client:
        first = [{"role": "user", "content": "what is 2+2?"}]
        r1, answer = post(client, "/v1/chat/completions", {"messages": first, "tools": TOOLS})
        post(client, "/v1/chat/completions", {"messages": first, "tools": TOOLS})  # a retry
        said = answer["choices"][0]["message"]
        nxt = [*first, said, {"role": "user", "content": "no, try again"}]
        post(client, "/v1/chat/completions", {"messages": nxt})  # no tools: a side call
        r2, _ = post(client, "/v1/chat/completions", {"messages": nxt, "tools": TOOLS})
    (turn,) = turns(server, scenario, 1)
    assert (turn.receipt_id, turn.next_receipt_id, turn.session_id) == (r1, r2, r1)
    assert (turn.next_state_role, turn.matched_by, turn.turn_index) == ("user", "transcript", 0)
    (record,) = [e for e in server.inference(scenario) if e.event_id == r1]
    assert isinstance(record, InferenceRecorded) and record.sealed
    assert record.has_tools is True
    assert record.message_fingerprints == [
        fingerprints.fingerprint(key, ["user", "what is 2+2?", []])
    ]
    assert record.answer_fingerprint == fingerprints.answer_fingerprint(key, answer)
    assert "2+2" not in "".join(record.message_fingerprints)


def test_anthropic_tagged_turns_bind_in_arrival_order(servers: dict[str, ReefServer]) -> None:
    server, scenario = servers["anthropic"], unique_scenario("sessions")
    key = fingerprints.scenario_key(SECRET.encode(), scenario)
    body = {"model": "claude-test", "max_tokens": 32, "tools": ANTHROPIC_TOOLS}
    tag = {"x-reef-tag-session": "agent-1"}
    with server.client(scenario) as client:
        first = [{"role": "user", "content": [{"type": "text", "text": "look it up"}]}]
        r1, answer = post(client, "/v1/messages", {**body, "messages": first}, **tag)
        result = {"type": "tool_result", "tool_use_id": "t1", "content": "found it"}
        nxt = [
            *first,
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": [result]},
        ]
        r2, _ = post(client, "/v1/messages", {**body, "messages": nxt}, **tag)
    (turn,) = turns(server, scenario, 1)
    assert (turn.receipt_id, turn.next_receipt_id) == (r1, r2)
    assert (turn.matched_by, turn.session_tag, turn.next_state_role) == ("tag", "agent-1", "tool")
    (record,) = [e for e in server.inference(scenario) if e.event_id == r2]
    assert isinstance(record, InferenceRecorded) and record.has_tools is True
    assert record.tags["session"] == "agent-1"
    assert record.message_fingerprints is not None
    assert [fingerprints.role_of(f) for f in record.message_fingerprints] == [
        "user",
        "assistant",
        "tool",
    ]
    assert record.message_fingerprints[1] == fingerprints.answer_fingerprint(key, answer)
