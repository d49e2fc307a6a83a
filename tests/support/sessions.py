"""The pure session processor in tests: exchanges as the API records them (fingerprints
included, bodies left out: the processor never reads them), a fresh processor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reef.core import fingerprints
from reef.core.events import InferenceRecorded
from reef.core.sessions import SessionProcessor, SessionSettings
from reef.core.state import DictState

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEY = fingerprints.scenario_key(b"test-secret", "demo")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fresh(**kwargs: Any) -> tuple[SessionProcessor, DictState]:
    return SessionProcessor(SessionSettings(**kwargs)), DictState()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool(text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c1", "content": text}


def exchange(
    rec: str,
    seconds: float,
    messages: list[dict[str, Any]],
    answer: str,
    *,
    scenario: str = "demo",
    tags: dict[str, str] | None = None,
    tools: bool = True,
    complete: bool = True,
    release: str = "rel-a",
) -> InferenceRecorded:
    """An exchange with receipt ``rec``: ``messages`` asked, ``answer`` given."""
    request: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        request["tools"] = TOOLS
    response = {"choices": [{"message": assistant(answer)}]}
    return InferenceRecorded(
        event_id=rec,
        scenario=scenario,
        occurred_at=at(seconds),
        producer="test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id=release,
        stream=False,
        status=200,
        complete=complete,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        tags=tags or {},
        sealed=True,
        message_fingerprints=fingerprints.request_fingerprints(KEY, request),
        answer_fingerprint=fingerprints.answer_fingerprint(KEY, response),
        has_tools=fingerprints.has_tools(request),
    )
