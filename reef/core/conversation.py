"""Conversation keys for session merging: which exchange a request continues.

An exchange (request messages + the answer) is a prefix of a later request when the
later request's messages start with exactly those messages followed by that answer.
Messages are normalised to (role, text) so the two dialects and string/block content
forms compare equal.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def _text(content: Any) -> Any:
    if isinstance(content, list):
        parts = [
            block.get("text", "") if isinstance(block, dict) else str(block)
            for block in content
            if not isinstance(block, dict) or block.get("type", "text") in ("text", "output_text")
        ]
        return "".join(parts)
    return content


def normalise(message: Any) -> list[Any]:
    if not isinstance(message, dict):
        return ["?", message]
    return [message.get("role"), _text(message.get("content"))]


def request_messages(request: Any) -> list[list[Any]]:
    """The conversation a request carries (Anthropic's ``system`` first), normalised."""
    if not isinstance(request, dict):
        return []
    out: list[list[Any]] = []
    if request.get("system"):
        out.append(["system", _text(request["system"])])
    messages = request.get("messages")
    if isinstance(messages, list):
        out.extend(normalise(m) for m in messages)
    return out


def answer_message(response: Any) -> list[Any] | None:
    """The assistant turn a response gave, in either dialect (buffered or assembled stream)."""
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("message"), dict):  # an assembled stream
        return normalise(response["message"])
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return normalise(choices[0].get("message"))
    if response.get("type") == "message":
        return ["assistant", _text(response.get("content"))]
    return None


def key_of(messages: list[list[Any]]) -> str:
    encoded = json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()[:32]
