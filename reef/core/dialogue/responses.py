"""The OpenAI Responses API: ``instructions`` and ``input`` items.

Each input item is one :class:`Message`: a ``message`` item as it is; a
``function_call`` (or ``custom_tool_call``) an assistant message holding one
:class:`ToolCall`; a ``function_call_output`` (or ``custom_tool_call_output``) a tool
message holding one :class:`ToolResult`; a ``reasoning`` item an assistant message
holding one :class:`Reasoning`; any other item an :class:`Opaque` part. The item's
type is kept in ``Message.extra["type"]`` when the item named it, so writing back is
exact; :func:`reef.core.dialogue.model.merged` joins them into turns for a template.
"""

from __future__ import annotations

from typing import Any

from reef.core.dialogue import media, messages
from reef.core.dialogue.model import (
    JSON,
    AnyPart,
    Conversation,
    Form,
    Media,
    Message,
    Opaque,
    Reasoning,
    Text,
    Tool,
    ToolCall,
    ToolResult,
)

RESPONSES = "responses"
_CALLS = {"function_call": "function", "custom_tool_call": "custom"}
_OUTPUTS = {"function_call_output": "function", "custom_tool_call_output": "custom"}
#: the item types session fingerprints have always read (others are skipped there)
FINGERPRINTED_ITEMS = frozenset({"message", "function_call", "function_call_output"})


def read_request(body: dict[str, Any]) -> Conversation:
    """A Responses request (``input`` a string or a list of items)."""
    params = {k: v for k, v in body.items() if k not in ("input", "instructions", "tools")}
    items = body["input"]
    if isinstance(items, str):
        found: tuple[Message, ...] = (Message("user", (Text(items, "input_text"),), form="string"),)
    else:
        found = tuple(read_item(i) for i in items)
    instructions = body.get("instructions")
    system: tuple[Text, ...] = ()
    if isinstance(instructions, str):
        system = (Text(instructions),)
    elif "instructions" in body:
        params["instructions"] = instructions
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        offered = tuple(read_tool(t) for t in tools)
    else:
        offered = ()
        if "tools" in body:
            params["tools"] = tools
    return Conversation(
        messages=found,
        tools=offered,
        system=system,
        system_field="instructions" if system else "",
        system_form="string" if system else "absent",
        params=params,
        dialect=RESPONSES,
        input_form="string" if isinstance(items, str) else "list",
    )


def read_tool(tool: JSON) -> Tool:
    if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
        rest = {
            k: v for k, v in tool.items() if k not in ("type", "name", "description", "parameters")
        }
        return Tool(
            name=str(tool.get("name", "")),
            description=tool.get("description"),
            parameters=tool.get("parameters"),
            kind=RESPONSES,
            extra={"rest": rest, "has": sorted(tool)},
        )
    return Tool(
        name=str(tool.get("name", tool.get("type", ""))) if isinstance(tool, dict) else "",
        kind="raw",
        extra={"raw": tool},
    )


def read_item(item: JSON) -> Message:
    if not isinstance(item, dict):
        return Message("?", (Opaque(item, RESPONSES),), form="raw")
    kind = item.get("type", "message")
    typed = {"type": item["type"]} if "type" in item else {}
    if kind == "message":
        rest = {k: v for k, v in item.items() if k not in ("role", "content")}
        parts, form = messages.read_content(item.get("content", messages.ABSENT), RESPONSES)
        return Message(str(item.get("role")), parts, form=form, extra=rest)
    if kind in _CALLS and isinstance(item.get("name"), str):
        field = "arguments" if kind == "function_call" else "input"
        raw = item.get(field)
        rest = {k: v for k, v in item.items() if k not in ("type", "call_id", "name", field)}
        call = ToolCall(
            id=str(item.get("call_id", "")),
            name=item["name"],
            arguments=messages.parse_arguments(raw) if kind == "function_call" else raw,
            raw_arguments=raw if isinstance(raw, str) and kind == "function_call" else None,
            kind=_CALLS[kind],
            extra=rest,
        )
        return Message("assistant", (call,), form="absent", extra=typed)
    if kind in _OUTPUTS:
        rest = {k: v for k, v in item.items() if k not in ("type", "call_id", "output")}
        parts, form = messages.read_content(item.get("output", messages.ABSENT), RESPONSES)
        result = ToolResult(
            str(item.get("call_id", "")), parts, form=form, kind=_OUTPUTS[kind], extra=rest
        )
        return Message("tool", (result,), form="absent", extra=typed)
    if kind == "reasoning":
        return Message("assistant", (Reasoning(item, RESPONSES),), form="absent", extra=typed)
    role = "tool" if str(kind).endswith("_output") else "assistant"
    return Message(role, (Opaque(item, RESPONSES),), form="absent", extra=typed)


def item_type(message: Message) -> str:
    """The Responses item type a message was read from (``message`` when untyped)."""
    return str(message.extra.get("type", "message"))


# -- writing ---------------------------------------------------------------------------


def to_responses(conversation: Conversation) -> dict[str, Any]:
    """The conversation as a Responses request."""
    body: dict[str, Any] = dict(conversation.params)
    if conversation.system:
        body["instructions"] = conversation.system_text()
    if conversation.input_form == "string" and len(conversation.messages) == 1:
        body["input"] = conversation.messages[0].text()
    else:
        items: list[JSON] = []
        for message in conversation.messages:
            items.extend(write_items(message))
        body["input"] = items
    if conversation.tools:
        body["tools"] = [_tool(t) for t in conversation.tools]
    return body


def _tool(tool: Tool) -> JSON:
    if tool.kind == RESPONSES:
        out: dict[str, Any] = {"type": "function", "name": tool.name}
        has = set(tool.extra.get("has", ()))
        if "description" in has:
            out["description"] = tool.description
        if "parameters" in has:
            out["parameters"] = tool.parameters
        out.update(tool.extra.get("rest", {}))
        return out
    if tool.kind == "raw":
        return tool.extra.get("raw")
    out = {
        "type": "function",
        "name": tool.name,
        "parameters": tool.parameters or {"type": "object"},
    }
    if tool.description is not None:
        out["description"] = tool.description
    return out


def write_items(message: Message) -> list[JSON]:
    """The input items of one message (several when a turn holds text and calls)."""
    if message.form == "raw" and message.role == "?":
        return [p.block for p in message.parts if isinstance(p, Opaque)]
    kind = message.extra.get("type")
    if (
        kind in _CALLS
        or kind in _OUTPUTS
        or kind == "reasoning"
        or (kind is not None and kind != "message")
    ):
        return [_item(message.parts[0])]
    plain = all(isinstance(p, Text | Media | Opaque) for p in message.parts)
    if plain and (not message.parts or message.form in ("string", "none")):
        return [_message_item(message, message.parts)]
    out: list[JSON] = []
    pending: list[AnyPart] = []
    for part in message.parts:  # in order: text runs become message items between calls
        if isinstance(part, Text | Media | Opaque):
            pending.append(part)
            continue
        if pending:
            out.append(_message_item(message, tuple(pending)))
            pending = []
        out.append(_item(part))
    if pending:
        out.append(_message_item(message, tuple(pending)))
    return out


def _message_item(message: Message, parts: tuple[AnyPart, ...]) -> JSON:
    extra = {
        k: v for k, v in message.extra.items() if not k.startswith("_") and k != "tool_call_id"
    }
    if message.extra.get("_role") is not None:
        extra = {}
    role = "user" if message.role == "tool" else message.role
    out: dict[str, Any] = {"role": role, **extra}
    if message.form != "absent":
        out["content"] = _content_out(parts, message.form, role)
    return out


def _content_out(parts: tuple[AnyPart, ...], form: Form, role: str) -> JSON:
    if form == "none":
        return None
    if form == "raw" and len(parts) == 1 and isinstance(parts[0], Opaque):
        return parts[0].block
    if form == "string" and all(isinstance(p, Text) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, Text))
    text_kind = "output_text" if role == "assistant" else "input_text"
    out: list[JSON] = []
    for part in parts:
        if isinstance(part, Text):
            if part.kind in ("input_text", "output_text"):
                out.append({"type": part.kind, "text": part.text, **part.extra})
            elif part.kind == "":
                out.append({"text": part.text, **part.extra})
            else:
                out.append({"type": text_kind, "text": part.text})
        elif isinstance(part, Media):
            out.append(media.to_responses(part))
        elif isinstance(part, Opaque):
            out.append(part.block)
    return out


def _item(part: AnyPart) -> JSON:
    if isinstance(part, ToolCall):
        if part.kind == "custom":
            return {
                "type": "custom_tool_call",
                "call_id": part.id,
                "name": part.name,
                "input": part.arguments_text(),
                **part.extra,
            }
        extra = part.extra if part.kind == "function" else {}
        return {
            "type": "function_call",
            "call_id": part.id,
            "name": part.name,
            "arguments": part.arguments_text(),
            **extra,
        }
    if isinstance(part, ToolResult):
        kind = "custom_tool_call_output" if part.kind == "custom" else "function_call_output"
        extra = part.extra if part.kind in ("function", "custom") else {}
        out: dict[str, Any] = {"type": kind, "call_id": part.call_id, **extra}
        if part.form != "absent":
            out["output"] = (
                _content_out(part.parts, part.form, "tool")
                if part.kind in ("function", "custom")
                else part.text()
            )
        return out
    if isinstance(part, Reasoning):
        if part.dialect == RESPONSES:
            return part.block
        return {"type": "reasoning", "summary": [{"type": "summary_text", "text": part.text()}]}
    if isinstance(part, Opaque):
        return part.block
    return {"role": "user", "content": _content_out((part,), "list", "user")}
