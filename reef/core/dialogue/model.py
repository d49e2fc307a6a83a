"""One conversation model for the three dialects Reef records.

A :class:`Conversation` is what a model sees: the tools offered, the system prompt, and
the messages, each made of parts. The converters (``chat``, ``anthropic``,
``responses`` in this package) read a dialect's request, buffered response or
assembled stream into this model and write it back.

**Lossless within a dialect.** Reading a body and writing it back to the same dialect
gives the same JSON: every key the model does not interpret is kept beside the part
that carried it (``extra``), a content given as a bare string stays a string
(``Message.form``), tool-call arguments keep their original JSON text. Across
dialects, everything a model sees is carried (text, images and documents as
references, tool calls and results, reasoning as opaque parts); provider-specific
keys of another dialect are not.

**Roles.** ``system``, ``developer``, ``user``, ``assistant``, ``tool``. A message that
carries tool results has role ``tool`` whatever the dialect called it (Anthropic sends
results as a ``user`` message of ``tool_result`` blocks); its other parts (text sent
beside the results) stay in it, in order.

**Dialect-specific head.** Anthropic's ``system`` and the Responses API's
``instructions`` are :attr:`Conversation.system` (with :attr:`Conversation.system_field`
naming which); a chat completions request has none, its system and developer prompts
are messages. :meth:`Conversation.flat` gives the one list a chat template renders.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

JSON = Any

#: how a message's (or a tool result's) content was written in its dialect
Form = Literal["string", "list", "none", "absent", "raw"]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _frozen(extra: Mapping[str, JSON] | None) -> dict[str, JSON]:
    return dict(extra or {})


@dataclass(frozen=True, slots=True)
class Text:
    """Text the model reads or wrote. ``kind`` is the dialect's block type name
    (``text``, ``input_text``, ``output_text``)."""

    text: str
    kind: str = "text"
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Media:
    """An image or a document, kept as the reference (URL, file id or inline source)
    the dialect gave; ``kind`` is ``image`` or ``document``."""

    kind: Literal["image", "document"]
    block: dict[str, JSON]
    dialect: str


@dataclass(frozen=True, slots=True)
class Reasoning:
    """Thinking or reasoning the model produced, opaque: signed or encrypted in some
    dialects, so it is kept whole and only sent back to the dialect it came from."""

    block: dict[str, JSON]
    dialect: str

    def text(self) -> str:
        """The readable part, when there is one (a summary or visible thinking)."""
        if isinstance(self.block.get("thinking"), str):
            return str(self.block["thinking"])
        if isinstance(self.block.get("reasoning_content"), str):
            return str(self.block["reasoning_content"])
        summary = self.block.get("summary")
        if isinstance(summary, list):
            return "".join(str(s.get("text", "")) for s in summary if isinstance(s, dict))
        return ""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made: ``arguments`` as JSON (``raw_arguments``: the JSON text a
    dialect sent, kept so writing it back is exact). ``kind`` is ``function``, or
    ``custom`` for free-form tools whose input is plain text."""

    id: str
    name: str
    arguments: JSON
    raw_arguments: str | None = None
    kind: str = "function"
    extra: dict[str, JSON] = field(default_factory=dict)

    def arguments_text(self) -> str:
        if self.raw_arguments is not None:
            return self.raw_arguments
        if self.kind == "custom" and isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Opaque:
    """A block or item the model sees but Reef does not interpret (a server tool's
    call or result, a new item type): kept whole for its own dialect."""

    block: JSON
    dialect: str


#: what a text, a tool result or a system prompt is made of
ContentPart = Text | Media | Opaque
#: what a message is made of, besides tool results
Part = Text | Media | Reasoning | ToolCall | Opaque


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned for the call ``call_id``."""

    call_id: str
    parts: tuple[ContentPart, ...]
    is_error: bool = False
    form: Form = "string"
    kind: str = "function"
    extra: dict[str, JSON] = field(default_factory=dict)

    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, Text))


AnyPart = Part | ToolResult


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    parts: tuple[AnyPart, ...]
    form: Form = "list"
    extra: dict[str, JSON] = field(default_factory=dict)

    def text(self) -> str:
        """The text the message carries (tool results' text first for a ``tool``
        message, then its own text parts)."""
        results = "".join(p.text() for p in self.parts if isinstance(p, ToolResult))
        return results + "".join(p.text for p in self.parts if isinstance(p, Text))

    def tool_calls(self) -> list[ToolCall]:
        return [p for p in self.parts if isinstance(p, ToolCall)]

    def tool_results(self) -> list[ToolResult]:
        return [p for p in self.parts if isinstance(p, ToolResult)]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool offered to the model: ``parameters`` is its JSON schema (None for a
    provider's built-in tool, whose ``extra`` holds the rest)."""

    name: str
    description: str | None = None
    parameters: JSON = None
    kind: str = "function"
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a request shows the model. ``params`` holds the request's other keys
    (model, sampling, streaming), untouched."""

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    system: tuple[Text, ...] = ()
    system_field: Literal["system", "instructions", ""] = ""
    system_form: Form = "absent"
    params: dict[str, JSON] = field(default_factory=dict)
    dialect: str = ""
    #: the Responses API's ``input`` given as a bare string (one user message)
    input_form: Form = "list"

    def system_text(self) -> str:
        return "".join(p.text for p in self.system)

    def flat(self) -> tuple[Message, ...]:
        """The system prompt as a leading ``system`` message, then the messages."""
        if not self.system:
            return self.messages
        head = Message("system", tuple(self.system), form=self.system_form)
        return (head, *self.messages)

    def extended(self, answer: tuple[Message, ...]) -> Conversation:
        """This conversation with the model's answer appended."""
        return replace(self, messages=(*self.messages, *answer))


def merged(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """Adjacent messages of the same role (``assistant`` or ``tool``) joined: the
    Responses API sends each call and output as its own item, a chat template wants
    one assistant turn holding its text and calls."""
    out: list[Message] = []
    for message in messages:
        last = out[-1] if out else None
        if last is not None and last.role == message.role and message.role in ("assistant", "tool"):
            out[-1] = Message(last.role, (*last.parts, *message.parts), form="list")
        else:
            out.append(message)
    return tuple(out)
