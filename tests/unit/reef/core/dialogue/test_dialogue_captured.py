"""Requests the real agent CLIs sent (tests/fixtures/agents) read into the conversation
model without loss: written back to their own dialect they are the same JSON, and the
tool call and its result are there as a call and a result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reef.core.dialogue import canonical, records
from reef.core.dialogue.chat_template import template_messages
from reef.core.dialogue.model import ToolCall, ToolResult

AGENTS = Path(__file__).resolve().parents[4] / "fixtures" / "agents"
BODIES = sorted(p for p in AGENTS.rglob("*.json") if not p.name.endswith(".headers.json"))
ROUTE = {"claude_code": "/v1/messages", "codex": "/v1/responses"}


def _route(path: Path) -> str:
    return ROUTE[path.relative_to(AGENTS).parts[0]]


def test_the_captures_are_there() -> None:
    kinds = {p.relative_to(AGENTS).parts[0] for p in BODIES}
    assert kinds == {"claude_code", "codex"}
    assert len(BODIES) >= 6


@pytest.mark.parametrize("path", BODIES, ids=lambda p: str(p.relative_to(AGENTS)))
def test_a_captured_request_round_trips_exactly(path: Path) -> None:
    body = json.loads(path.read_bytes())
    route = _route(path)
    conversation = records.conversation_of(body, route)
    assert conversation is not None
    dialect = records.DIALECT_OF_ROUTE[route]
    assert records.to_dialect(conversation, dialect) == body
    assert records.dialect_of(body) == dialect  # recognised by shape alone too
    assert canonical.canonical_messages(body) == canonical.canonical_messages(body, route)


@pytest.mark.parametrize("cli", ["claude_code/quiet", "claude_code/interactive", "codex/exec"])
def test_the_tool_turn_is_a_call_and_a_result(cli: str) -> None:
    path = AGENTS / cli / "tool_result_request.json"
    conversation = records.conversation_of(json.loads(path.read_bytes()), _route(path))
    assert conversation is not None and conversation.tools
    calls = [p for m in conversation.messages for p in m.parts if isinstance(p, ToolCall)]
    results = [p for m in conversation.messages for p in m.parts if isinstance(p, ToolResult)]
    assert len(calls) == 1 and len(results) == 1
    assert results[0].call_id == calls[0].id
    assert calls[0].name in ("Write", "exec_command")
    assert "hello" in json.dumps(calls[0].arguments)
    rendered = template_messages(conversation.flat())
    with_calls = [m for m in rendered if m.get("tool_calls")]
    assert len(with_calls) == 1 and with_calls[0]["role"] == "assistant"
    (tool,) = [m for m in rendered if m["role"] == "tool"]
    assert tool["tool_call_id"] == calls[0].id
