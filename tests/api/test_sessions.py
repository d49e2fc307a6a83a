"""Sessions through the API: the app ``reef serve`` builds with ``REEF_TRACK_SESSIONS``, in
process, with the embedded processors beside it (tests/support/embedded_app.py).

Through the HTTP API, an agent's turns (OpenAI, untagged: transcript resends) and a
tagged Anthropic session come out as ``TurnCompleted`` on ``reef.turns``; the recorded
exchanges carry the fingerprints the processor matched on (never the text), and a
client retry and a side call bind nothing.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from reef.core import fingerprints
from reef.core.events import InferenceRecorded, TurnCompleted
from reef.core.topics import TURNS
from tests.support.api import unique_scenario
from tests.support.embedded_app import AppFactory, EmbeddedApp

SECRET = "api-fingerprint-secret"
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
ANTHROPIC_TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]


@pytest.fixture(scope="module")
def apps(app_factory: AppFactory) -> dict[str, EmbeddedApp]:
    env = {"REEF_TRACK_SESSIONS": "true", "REEF_FINGERPRINT_SECRET": SECRET}
    return {dialect: app_factory(dialect=dialect, env=env) for dialect in ("openai", "anthropic")}


def turns(app: EmbeddedApp, scenario: str, count: int) -> list[TurnCompleted]:
    deadline = time.monotonic() + 10
    while True:
        found = [e for e in app.events(TURNS, scenario) if isinstance(e, TurnCompleted)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def post(client: httpx.Client, path: str, body: dict[str, Any], **headers: str) -> Any:
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"], response.json()


def test_openai_turns_are_matched_by_transcript_and_the_record_has_fingerprints(
    apps: dict[str, EmbeddedApp],
) -> None:
    app, scenario = apps["openai"], unique_scenario("sessions")
    key = fingerprints.scenario_key(SECRET.encode(), scenario)
    with app.client(scenario) as client:
        first = [{"role": "user", "content": "what is 2+2?"}]
        r1, answer = post(client, "/v1/chat/completions", {"messages": first, "tools": TOOLS})
        post(client, "/v1/chat/completions", {"messages": first, "tools": TOOLS})  # a retry
        said = answer["choices"][0]["message"]
        nxt = [*first, said, {"role": "user", "content": "no, try again"}]
        post(client, "/v1/chat/completions", {"messages": nxt})  # no tools: a side call
        r2, _ = post(client, "/v1/chat/completions", {"messages": nxt, "tools": TOOLS})
    (turn,) = turns(app, scenario, 1)
    assert (turn.receipt_id, turn.next_receipt_id, turn.session_id) == (r1, r2, r1)
    assert (turn.next_state_role, turn.matched_by, turn.turn_index) == ("user", "transcript", 0)
    (record,) = [e for e in app.inference(scenario) if e.event_id == r1]
    assert isinstance(record, InferenceRecorded) and record.sealed
    assert record.has_tools is True
    assert record.message_fingerprints == [
        fingerprints.fingerprint(key, ["user", "what is 2+2?", []])
    ]
    assert record.answer_fingerprint == fingerprints.answer_fingerprint(key, answer)
    assert "2+2" not in "".join(record.message_fingerprints)


def test_anthropic_tagged_turns_bind_in_arrival_order(apps: dict[str, EmbeddedApp]) -> None:
    app, scenario = apps["anthropic"], unique_scenario("sessions")
    key = fingerprints.scenario_key(SECRET.encode(), scenario)
    body = {"model": "claude-test", "max_tokens": 32, "tools": ANTHROPIC_TOOLS}
    tag = {"x-reef-tag-session": "agent-1"}
    with app.client(scenario) as client:
        first = [{"role": "user", "content": [{"type": "text", "text": "look it up"}]}]
        r1, answer = post(client, "/v1/messages", {**body, "messages": first}, **tag)
        result = {"type": "tool_result", "tool_use_id": "t1", "content": "found it"}
        nxt = [
            *first,
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": [result]},
        ]
        r2, _ = post(client, "/v1/messages", {**body, "messages": nxt}, **tag)
    (turn,) = turns(app, scenario, 1)
    assert (turn.receipt_id, turn.next_receipt_id) == (r1, r2)
    assert (turn.matched_by, turn.session_tag, turn.next_state_role) == ("tag", "agent-1", "tool")
    (record,) = [e for e in app.inference(scenario) if e.event_id == r2]
    assert isinstance(record, InferenceRecorded) and record.has_tools is True
    assert record.tags["session"] == "agent-1"
    assert record.message_fingerprints is not None
    assert [fingerprints.role_of(f) for f in record.message_fingerprints] == [
        "user",
        "assistant",
        "tool",
    ]
    assert record.message_fingerprints[1] == fingerprints.answer_fingerprint(key, answer)
