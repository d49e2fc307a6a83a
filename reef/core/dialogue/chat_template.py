"""The conversation model as chat-template messages: what ``apply_chat_template`` reads.

Hugging Face chat templates (and OpenAI chat completions) take messages with ``role``
and ``content`` text, ``tool_calls`` on an assistant turn (``{"type": "function",
"id", "function": {"name", "arguments"}}`` with arguments as an object, the form the
templates of tool-calling model families expect) and one ``tool`` message per result
with its ``tool_call_id``. Adjacent assistant items (the Responses API's separate
calls) are one turn; reasoning is left out of the rendered history, as those
templates do for earlier turns; images and documents become a text marker.
"""

from __future__ import annotations

from typing import Any

from reef.core.dialogue.model import (
    Media,
    Message,
    Opaque,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    merged,
)


def template_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in merged(messages):
        if message.role == "tool":
            out.extend(_results(message))
            continue
        entry: dict[str, Any] = {"role": message.role, "content": _text(message)}
        calls = message.tool_calls()
        if calls:
            entry["tool_calls"] = [_call(c) for c in calls]
        out.append(entry)
    return out


def template_tools(tools: tuple[Tool, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in tools:
        if tool.kind == "raw":
            continue  # a provider's built-in tool: nothing a template can render
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters or {}}
        if tool.description is not None:
            function["description"] = tool.description
        out.append({"type": "function", "function": function})
    return out


def _call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments if isinstance(call.arguments, dict) else {"input": call.arguments}
    return {
        "type": "function",
        "id": call.id,
        "function": {"name": call.name, "arguments": arguments},
    }


def _results(message: Message) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, ToolResult):
            out.append(
                {"role": "tool", "tool_call_id": part.call_id, "content": _content(part.parts)}
            )
        elif isinstance(part, Text) and part.text:
            out.append({"role": "user", "content": part.text})
    return out


def _text(message: Message) -> str:
    return _content(tuple(p for p in message.parts if isinstance(p, Text | Media | Opaque)))


def _content(parts: tuple[Any, ...]) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, Text):
            out.append(part.text)
        elif isinstance(part, Media):
            out.append(f"[{part.kind}]")
    return "".join(out)
