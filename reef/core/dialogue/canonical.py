"""The canonical form of a message that session matching and the join compare.

``[role, text, calls]``: the role (a message carrying tool results is ``tool``), the
text of its text parts (a tool message's results first), and its tool calls as
``[name, arguments]``. Call ids, images and documents, reasoning, and Responses items
other than messages, function calls and their outputs are left out, so the dialects,
string and block content, and a client that rewrites call ids compare equal.

This form is stable: records already on the log carry fingerprints of it, and a new
record must fingerprint a message exactly as they did.
``tests/unit/reef/core/dialogue/test_dialogue.py`` holds the definition it had before the
conversation model and checks the two agree on generated conversations of every dialect.
"""

from __future__ import annotations

import json
from typing import Any

from reef.core.dialogue import records
from reef.core.dialogue.model import JSON, Conversation, Message, Opaque, Text, ToolCall, ToolResult
from reef.core.dialogue.responses import FINGERPRINTED_ITEMS, RESPONSES, item_type

_TEXT_KINDS = frozenset({"text", "input_text", "output_text"})

Canonical = list[Any]


def canonical_messages(request: JSON, route: str | None = None) -> list[Canonical] | None:
    """The request's conversation as canonical messages; None when it carries none."""
    conversation = records.conversation_of(request, route)
    if conversation is None:
        return None
    return of_conversation(conversation)


def of_conversation(conversation: Conversation) -> list[Canonical]:
    out: list[Canonical] = []
    if conversation.system and not (
        conversation.system_form == "string" and conversation.system_text() == ""
    ):
        out.append(["system", conversation.system_text(), []])
    for message in conversation.messages:
        found = of_message(message, conversation.dialect)
        if found is not None:
            out.append(found)
    return out


def canonical_answer(response: JSON, route: str | None = None) -> Canonical | None:
    """The first message of the answer a response gave (None: none found)."""
    dialect = records.DIALECT_OF_ROUTE.get(route or "", "")
    for message in records.answer_of(response, route):
        found = of_message(message, dialect or _dialect_of_answer(message))
        if found is not None and (found[1] or found[2] or dialect != RESPONSES):
            return found
    return None


def _dialect_of_answer(message: Message) -> str:
    return RESPONSES if "type" in message.extra else ""


def of_message(message: Message, dialect: str) -> Canonical | None:
    """The canonical form of one message; None for an item matching never reads."""
    if dialect == RESPONSES and item_type(message) not in FINGERPRINTED_ITEMS:
        return None
    if message.role == "?" and message.form == "raw":
        return [
            "?",
            str(message.parts[0].block if isinstance(message.parts[0], Opaque) else ""),
            [],
        ]
    results = "".join(_text(p.parts, p.form) for p in message.parts if isinstance(p, ToolResult))
    own = _text(tuple(p for p in message.parts if not isinstance(p, ToolResult)), message.form)
    calls = [[c.name, c.arguments] for c in message.parts if isinstance(c, ToolCall)]
    return [message.role, results + own, calls]


def _text(parts: tuple[Any, ...], form: str) -> str:
    if form == "raw" and len(parts) == 1 and isinstance(parts[0], Opaque):
        return json.dumps(parts[0].block, sort_keys=True)
    out: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            out.append(part.text)
        elif _is_text_block(part):
            assert isinstance(part, Opaque)
            out.append(str(part.block.get("text", "")))
    return "".join(out)


def _is_text_block(part: Any) -> bool:
    """A text block whose text is not a string (kept opaque, read as its ``str``)."""
    if not isinstance(part, Opaque) or not isinstance(part.block, dict):
        return False
    return part.block.get("type", "text") in _TEXT_KINDS
