"""Recorded exchanges read into the conversation model, and written back out.

A record carries a request body and a response body (buffered, or a stream as Reef
assembled it: :mod:`reef.core.dialogue.streams`). Its route names the dialect; a body
read without one is recognised by its shape.
"""

from __future__ import annotations

from typing import Any

from reef.core.dialogue import messages, responses, streams
from reef.core.dialogue.messages import ANTHROPIC, CHAT
from reef.core.dialogue.model import JSON, Conversation, Message, Text
from reef.core.dialogue.responses import RESPONSES

DIALECT_OF_ROUTE = {
    "/v1/chat/completions": CHAT,
    "/v1/messages": ANTHROPIC,
    "/v1/messages/count_tokens": ANTHROPIC,
    "/v1/responses": RESPONSES,
}
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


def dialect_of(body: JSON, route: str | None = None) -> str | None:
    """``chat``, ``anthropic`` or ``responses``: by route, else by the body's shape."""
    if route in DIALECT_OF_ROUTE:
        return DIALECT_OF_ROUTE[route]
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("input"), str | list) and not isinstance(body.get("messages"), list):
        return RESPONSES
    if not isinstance(body.get("messages"), list):
        return None
    if "system" in body or any(_anthropic_shaped(m) for m in body["messages"]):
        return ANTHROPIC
    return CHAT


def _anthropic_shaped(message: JSON) -> bool:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return False
    return any(
        isinstance(b, dict) and (b.get("type") in _ANTHROPIC_BLOCKS or "source" in b)
        for b in message["content"]
    )


def conversation_of(request: JSON, route: str | None = None) -> Conversation | None:
    """What the request showed the model; None when it carries no conversation."""
    dialect = dialect_of(request, route)
    if dialect is None or not isinstance(request, dict):
        return None
    if isinstance(request.get("messages"), list):
        return messages.read_request(request, ANTHROPIC if dialect == ANTHROPIC else CHAT)
    if isinstance(request.get("input"), str | list):
        return responses.read_request(request)
    return None


def answer_of(response: JSON, route: str | None = None) -> tuple[Message, ...]:
    """The messages the model answered with (empty: none found)."""
    if not isinstance(response, dict):
        return ()
    if response.get("stream") is True and (
        isinstance(response.get("sse"), str) or isinstance(response.get("message"), dict)
    ):
        return _assembled(response, route)
    if response.get("object") == "response" or (
        route == "/v1/responses" and isinstance(response.get("output"), list)
    ):
        return tuple(responses.read_item(i) for i in response.get("output") or [])
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        return (messages.read_message(message, CHAT),) if isinstance(message, dict) else ()
    if response.get("type") == "message":
        body = {"role": "assistant", "content": response.get("content")}
        return (messages.read_message(body, ANTHROPIC),)
    return ()


def _assembled(response: dict[str, Any], route: str | None) -> tuple[Message, ...]:
    sse = response.get("sse")
    sse = sse if isinstance(sse, str) else ""
    final = response.get("response")
    if isinstance(final, dict) and isinstance(final.get("output"), list):
        return tuple(responses.read_item(i) for i in final["output"])
    readers = {
        CHAT: streams.chat_completion,
        ANTHROPIC: streams.anthropic_message,
        RESPONSES: streams.responses_object,
    }
    order = [DIALECT_OF_ROUTE[route]] if route in DIALECT_OF_ROUTE else list(readers)
    for dialect in order:
        rebuilt = readers[dialect](sse)
        if rebuilt is not None:
            return answer_of(rebuilt)
    text = response.get("message")
    if isinstance(text, dict) and isinstance(text.get("content"), str):
        return (Message("assistant", (Text(text["content"]),), form="string"),)
    return ()


def to_dialect(conversation: Conversation, dialect: str) -> dict[str, Any]:
    """The conversation as a request of ``dialect``."""
    if dialect == CHAT:
        return messages.to_chat(conversation)
    if dialect == ANTHROPIC:
        return messages.to_anthropic(conversation)
    if dialect == RESPONSES:
        return responses.to_responses(conversation)
    raise ValueError(f"unknown dialect {dialect!r}")
