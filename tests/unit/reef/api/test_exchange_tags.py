"""An exchange's tags from a request's headers and body (reef.api.tags), in process: the
headers go through an ASGI app (httpx.ASGITransport) as a client sends them, so header
names with dashes or underscores, their case and repeats are what the server sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from reef.api.tags import exchange_tags

TOOLS = [{"name": "Write", "input_schema": {"type": "object"}}]
TURN = {
    "model": "m",
    "max_tokens": 64,
    "tools": TOOLS,
    "messages": [{"role": "user", "content": "hi"}],
}


def app(*, agent_sessions: bool = True, classify: bool = True) -> Starlette:
    async def tags(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        found = exchange_tags(request, body, agent_sessions=agent_sessions, classify=classify)
        return JSONResponse(found)

    return Starlette(routes=[Route("/v1/messages", tags, methods=["POST"])])


async def tags_of(
    headers: dict[str, str] | list[tuple[str, str]], body: Any = TURN, **settings: bool
) -> dict[str, str]:
    transport = httpx.ASGITransport(app=app(**settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://reef") as client:
        response = await client.post("/v1/messages", json=body, headers=headers)
    assert response.status_code == 200, response.text
    found: dict[str, str] = response.json()
    return found


async def test_claude_codes_session_header_becomes_the_session_tag() -> None:
    found = await tags_of({"X-Claude-Code-Session-Id": "cc-1", "x-reef-tag-team": "a"})
    assert found == {"session": "cc-1", "session-source": "claude-code", "team": "a"}


async def test_codexs_underscored_and_dashed_headers_reach_the_tags() -> None:
    meta = json.dumps({"turn_id": "turn-3", "request_kind": "turn"})
    found = await tags_of({"session_id": "s-1", "thread-id": "t-1", "x-codex-turn-metadata": meta})
    assert found == {
        "session": "s-1",
        "thread": "t-1",
        "turn-id": "turn-3",
        "request-kind": "turn",
        "session-source": "codex",
    }


async def test_an_explicit_session_tag_always_wins() -> None:
    headers = {"x-claude-code-session-id": "cc-1", "X-Reef-Tag-Session": "mine"}
    assert await tags_of(headers) == {"session": "mine"}


async def test_the_setting_off_ignores_agent_headers_but_not_the_clients_tags() -> None:
    headers = {"x-claude-code-session-id": "cc-1", "x-reef-tag-session": "mine"}
    assert await tags_of(headers, agent_sessions=False) == {"session": "mine"}
    assert await tags_of({"session-id": "s-1"}, agent_sessions=False) == {}


async def test_a_side_call_is_tagged_by_its_shape_unless_the_client_typed_it() -> None:
    quota = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]}
    found = await tags_of({"x-claude-code-session-id": "cc-1"}, quota)
    assert (found["turn-type"], found["side-kind"]) == ("side", "quota")
    forced = await tags_of({"x-reef-tag-turn-type": "main"}, quota)
    assert forced == {"turn-type": "main"}
    assert await tags_of({}, quota, classify=False) == {}
    codex = await tags_of({"session-id": "s", "x-openai-subagent": "compact"})
    assert codex["side-kind"] == "compaction"


async def test_a_history_that_says_it_was_compacted_is_tagged_while_sessions_are_tracked() -> None:
    opening = "This session is being continued from a previous conversation that ran out"
    body = {**TURN, "messages": [{"role": "user", "content": opening}]}
    found = await tags_of({"x-claude-code-session-id": "cc-1"}, body)
    assert found["history"] == "compacted" and "turn-type" not in found
    assert "history" not in await tags_of(
        {"x-claude-code-session-id": "cc-1"}, body, classify=False
    )


FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "agents"
HOP_BY_HOP = {"host", "content-length", "connection", "accept-encoding"}


@pytest.mark.parametrize(
    ("run", "name", "session_header", "expected"),
    [
        ("claude_code/quiet", "first_request", "x-claude-code-session-id", {}),
        ("claude_code/interactive", "tool_result_request", "x-claude-code-session-id", {}),
        (
            "claude_code/interactive",
            "side_02_post_v1_messages",
            "x-claude-code-session-id",
            {"turn-type": "side", "side-kind": "title"},
        ),
        ("codex/exec", "first_request", "session-id", {"request-kind": "turn"}),
    ],
)
async def test_the_captured_agent_requests_are_tagged_with_their_own_session(
    run: str, name: str, session_header: str, expected: dict[str, str]
) -> None:
    """The CLIs' captured requests, their headers as sent (the token stays a placeholder)."""
    head = json.loads((FIXTURES / run / f"{name}.headers.json").read_text())
    headers = [(k, v) for k, v in head["headers"] if k.lower() not in HOP_BY_HOP]
    body = json.loads((FIXTURES / run / f"{name}.json").read_bytes())
    found = await tags_of(headers, body)
    session = next(v for k, v in headers if k.lower() == session_header)
    assert found["session"] == session
    assert found["session-source"] == ("codex" if run.startswith("codex") else "claude-code")
    assert expected.items() <= found.items()
    assert ("turn-type" in found) == ("turn-type" in expected)
