"""A conversation as readable text: what a judge or a harness proposer reads.

Each message is one ``(role, text)`` entry, its text parts joined by newlines, each tool
call as ``[tool_call: name(arguments)]`` and a tool message as its results' text (role
``tool``). Reasoning is left out; an image or a document is ``[image]``/``[document]``.
Adjacent assistant items (the Responses API's separate calls) are one entry.
"""

from __future__ import annotations

from reef.core.dialogue.model import Media, Message, Text, ToolCall, ToolResult, merged


def entries(messages: tuple[Message, ...]) -> list[tuple[str, str]]:
    return [(m.role, message_text(m)) for m in merged(messages) if m.parts or m.role != "assistant"]


def message_text(message: Message) -> str:
    lines: list[str] = []
    for part in message.parts:
        if isinstance(part, Text) and part.text:
            lines.append(part.text)
        elif isinstance(part, Media):
            lines.append(f"[{part.kind}]")
        elif isinstance(part, ToolCall):
            lines.append(f"[tool_call: {part.name}({part.arguments_text()})]")
        elif isinstance(part, ToolResult):
            text = "\n".join(
                p.text if isinstance(p, Text) else f"[{p.kind}]"
                for p in part.parts
                if isinstance(p, Text | Media)
            )
            lines.append(f"[tool_error] {text}" if part.is_error else text)
    return "\n".join(line for line in lines if line)
