"""What a test sends to Reef's HTTP API and how it checks the errors it gets back.

Request bodies of both dialects, unique scenario names and prompt markers, and the
error shapes of the HTTP contract (OpenAI, Anthropic and Reef's own).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

RECEIPT = re.compile(r"^[0-9a-f]{32}$")
AGENT_FIXTURES = Path(__file__).parents[1] / "fixtures" / "agents"


def unique_scenario(prefix: str = "e2e") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def marker() -> str:
    """A unique word to put in a prompt, to find the exchange again upstream or in the log."""
    return f"m{uuid.uuid4().hex[:16]}"


# ---------------------------------------------------------------------------
# Error shapes (the HTTP contract's common rules)


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), body
    assert isinstance(error["message"], str) and error["message"], body
    return body


def assert_anthropic_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and body.get("type") == "error", body
    error = body.get("error")
    assert isinstance(error, dict), body
    assert isinstance(error.get("type"), str) and error["type"], body
    assert isinstance(error.get("message"), str) and error["message"], body
    return body


def assert_reef_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    error = body["error"]
    assert isinstance(error.get("code"), str), body
    assert re.fullmatch(r"[a-z][a-z0-9_]*", error["code"]), f"code not snake_case: {body}"
    assert isinstance(error.get("message"), str) and error["message"], body
    return body


def error_shape_for(path: str) -> Callable[[httpx.Response, int], dict[str, Any]]:
    if path.startswith("/v1/messages"):
        return assert_anthropic_error
    if path.startswith("/v1/"):
        return assert_openai_error
    return assert_reef_error


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], **extra}


def messages_body(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def claude_code_turns(count: int = 2) -> list[bytes]:
    """The captured Claude Code request, then ``count`` next turns as the CLI writes them
    (compact, UTF-8): the answer's tool call and its result appended, the cache
    breakpoint moved to the newest message."""
    first = json.loads(
        (AGENT_FIXTURES / "claude_code" / "quiet" / "first_request.json").read_text()
    )
    turns = [first]
    for n in range(count):
        body = json.loads(json.dumps(turns[-1]))
        for message in body["messages"]:
            if isinstance(message["content"], list):
                for part in message["content"]:
                    part.pop("cache_control", None)
        call = f"toolu_{n}"
        body["messages"] += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": call, "name": "Write", "input": {"n": n}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call,
                        "content": f"wrote file {n} ✓ 🤖",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ]
        turns.append(body)
    return [orjson.dumps(t) for t in turns]
