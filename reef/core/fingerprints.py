"""Message fingerprints: what session matching needs from a sealed exchange, and no more.

Bodies are sealed (and may be claim-checked) before they reach the log, so a processor
cannot read the messages it would compare. The API therefore records, beside the sealed
bodies, one fingerprint per request message and one for the response's assistant
message (``InferenceRecorded.message_fingerprints`` / ``answer_fingerprint``), while the
deployment tracks sessions (``REEF_TRACK_SESSIONS``; off, nothing is computed).

A fingerprint is ``<role>:<32 hex>``: the role in clear (matching needs it, and it says
nothing about the content), then HMAC-SHA256 over the canonical message, truncated to
128 bits. The canonical message is (role, the text of its text parts, its tool calls as
(name, arguments)); tool-call ids, images and other non-text parts, and reasoning items
are ignored, so both dialects, string and block content, and a client that rewrites
call ids compare equal. A tool result is role ``tool`` in either dialect (Anthropic
sends it as a ``user`` message of ``tool_result`` blocks).

The HMAC key is per scenario, derived from a deployment secret
(``REEF_FINGERPRINT_SECRET``): :func:`scenario_key`. Equal messages therefore have equal
fingerprints only within one scenario of one deployment, and someone who reads the log
without the secret cannot test a guessed message ("yes", "thanks") against them, nor
link an erased record's messages to anything: the fingerprints stay on the log after an
erasure destroys the record's data key, and carry no content. Without a secret the key
is derived from the scenario name alone: matching works the same, but guesses can be
confirmed by anyone with log access (docs/architecture.md, "Sessions and turns").
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_KEY_LABEL = b"reef-fingerprint-v1/"


def scenario_key(secret: bytes, scenario: str) -> bytes:
    """The HMAC key of one scenario's fingerprints."""
    return hmac.new(secret, _KEY_LABEL + scenario.encode(), hashlib.sha256).digest()


def fingerprint(key: bytes, message: list[Any]) -> str:
    """``<role>:<hmac>`` of one canonical message (see :func:`canonical_messages`)."""
    encoded = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hmac.new(key, encoded.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{message[0]}:{digest}"


def role_of(fp: str) -> str:
    return fp.rpartition(":")[0]


def request_fingerprints(key: bytes, request: Any) -> list[str] | None:
    """One fingerprint per message of the request; None when it carries no conversation."""
    messages = canonical_messages(request)
    if messages is None:
        return None
    return [fingerprint(key, m) for m in messages]


def answer_fingerprint(key: bytes, response: Any) -> str | None:
    """The fingerprint of the assistant message a response gave (None: none found)."""
    message = canonical_answer(response)
    return None if message is None else fingerprint(key, message)


def has_tools(request: Any) -> bool:
    """Whether the request offers tool schemas (an agent's main turn does)."""
    return isinstance(request, dict) and bool(request.get("tools"))


# -- canonical forms -----------------------------------------------------------------


def canonical_messages(request: Any) -> list[list[Any]] | None:
    """The request's conversation as canonical messages, in either dialect or route."""
    if not isinstance(request, dict):
        return None
    out: list[list[Any]] = []
    for head in ("system", "instructions"):  # Anthropic; OpenAI Responses
        if request.get(head):
            out.append(["system", _text(request[head]), []])
    if isinstance(request.get("messages"), list):
        out.extend(_message(m) for m in request["messages"])
        return out
    items = request.get("input")
    if isinstance(items, str):
        return [*out, ["user", items, []]]
    if isinstance(items, list):
        return out + [m for m in (_item(i) for i in items) if m is not None]
    return None


def canonical_answer(response: Any) -> list[Any] | None:
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("message"), dict):  # a stream Reef assembled
        return _message(response["message"])
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        return _message(message) if isinstance(message, dict) else None
    if response.get("type") == "message":  # Anthropic
        return _message({**response, "role": "assistant"})
    return None


def _message(message: Any) -> list[Any]:
    if not isinstance(message, dict):
        return ["?", str(message), []]
    role = str(message.get("role"))
    content = message.get("content")
    calls = [_openai_call(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        calls += [[b.get("name"), b.get("input")] for b in blocks if b.get("type") == "tool_use"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            role = "tool"
            text = "".join(_text(b.get("content")) for b in results) + _text(content)
            return [role, text, calls]
    return [role, _text(content), calls]


def _item(item: Any) -> list[Any] | None:
    """One OpenAI Responses input item (reasoning and unknown items are skipped)."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message")
    if kind == "message" or (kind is None and "role" in item):
        return _message(item)
    if kind == "function_call":
        return ["assistant", "", [[item.get("name"), _arguments(item.get("arguments"))]]]
    if kind == "function_call_output":
        return ["tool", _text(item.get("output")), []]
    return None


def _openai_call(call: dict[str, Any]) -> list[Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        return [None, None]
    return [function.get("name"), _arguments(function.get("arguments"))]


def _arguments(arguments: Any) -> Any:
    """Arguments as JSON values (OpenAI sends a JSON string; Anthropic an object)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type", "text") in _TEXT_PARTS
        )
    return json.dumps(content, sort_keys=True)
