"""The ``messages`` dialects: OpenAI chat completions and Anthropic messages.

One reader accepts both (their message lists overlap, and a recorded body is read
whatever route carried it); :func:`to_chat` and :func:`to_anthropic` write each.
Anthropic's ``system`` is :attr:`Conversation.system`; chat completions' system and
developer prompts stay messages.
"""

from __future__ import annotations

import json
from typing import Any

from reef.core.dialogue import media
from reef.core.dialogue.model import (
    JSON,
    AnyPart,
    ContentPart,
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

ANTHROPIC = "anthropic"
CHAT = "chat"
_TEXT_KINDS = frozenset({"text", "input_text", "output_text"})
_THINKING = frozenset({"thinking", "redacted_thinking"})


# -- reading ---------------------------------------------------------------------------


def read_request(body: dict[str, Any], dialect: str) -> Conversation:
    """A chat completions or Anthropic messages request (``body["messages"]`` a list)."""
    found = body.get("tools")
    offered = isinstance(found, list) and bool(found)  # an empty or odd list stays a param
    tools: list[JSON] = found if isinstance(found, list) and offered else []
    skip = ("messages", "system", "tools") if offered else ("messages", "system")
    params = {k: v for k, v in body.items() if k not in skip}
    system, system_form = _system(body)
    return Conversation(
        messages=tuple(read_message(m, dialect) for m in body["messages"]),
        tools=tuple(read_tool(t) for t in tools),
        system=system,
        system_field="system" if "system" in body else "",
        system_form=system_form,
        params=params,
        dialect=dialect,
    )


def _system(body: dict[str, Any]) -> tuple[tuple[Text, ...], Form]:
    if "system" not in body:
        return (), "absent"
    value = body["system"]
    if isinstance(value, str):
        return (Text(value),), "string"
    if isinstance(value, list):
        parts = [read_content_part(p, ANTHROPIC) for p in value]
        if all(isinstance(p, Text) for p in parts):
            return tuple(p for p in parts if isinstance(p, Text)), "list"
    return (Text(json.dumps(value, sort_keys=True)),), "raw"


def read_tool(tool: JSON) -> Tool:
    if not isinstance(tool, dict):
        return Tool(name="", kind="raw", extra={"raw": tool})
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, dict):  # chat completions
        rest = {k: v for k, v in function.items() if k not in ("name", "description", "parameters")}
        outer = {k: v for k, v in tool.items() if k not in ("type", "function")}
        return Tool(
            name=str(function.get("name", "")),
            description=function.get("description"),
            parameters=function.get("parameters"),
            kind="chat",
            extra={"function": rest, "outer": outer, "has": sorted(function)},
        )
    if "input_schema" in tool:  # Anthropic client tool
        rest = {k: v for k, v in tool.items() if k not in ("name", "description", "input_schema")}
        return Tool(
            name=str(tool.get("name", "")),
            description=tool.get("description"),
            parameters=tool.get("input_schema"),
            kind="anthropic",
            extra={"rest": rest, "has": sorted(tool)},
        )
    return Tool(name=str(tool.get("name", tool.get("type", ""))), kind="raw", extra={"raw": tool})


def read_message(message: JSON, dialect: str) -> Message:
    if not isinstance(message, dict):
        return Message("?", (Opaque(message, dialect),), form="raw")
    role = str(message.get("role"))
    extra = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls")}
    parts: list[AnyPart] = []
    if isinstance(extra.get("reasoning_content"), str):
        parts.append(Reasoning({"reasoning_content": extra.pop("reasoning_content")}, CHAT))
    content = message.get("content", ABSENT)
    form: Form
    if role == "tool" and "tool_call_id" in message:  # a chat completions tool message
        call_id = extra.pop("tool_call_id")
        result_parts, form = read_content(content, dialect)
        result = ToolResult(str(call_id), result_parts, form=form, kind=CHAT)
        return Message("tool", (result,), form=form, extra=extra)
    content_parts, form = _message_content(content, dialect)
    parts.extend(content_parts)
    calls = message.get("tool_calls", ABSENT)
    if isinstance(calls, list) and calls:
        parts.extend(_chat_call(c) for c in calls)
    elif calls is not ABSENT:
        extra["tool_calls"] = calls
    if any(isinstance(p, ToolResult) for p in parts):
        role = "tool"
        extra["_role"] = message.get("role")
    return Message(role, tuple(parts), form=form, extra=extra)


#: a key the body did not have (distinct from an explicit null)
ABSENT: Any = object()


def read_content(content: JSON, dialect: str) -> tuple[tuple[ContentPart, ...], Form]:
    """A content field's parts, and how it was written (absent, null, string, list)."""
    if content is ABSENT:
        return (), "absent"
    if content is None:
        return (), "none"
    if isinstance(content, str):
        return (Text(content),), "string"
    if isinstance(content, list):
        return tuple(read_content_part(p, dialect) for p in content), "list"
    return (Opaque(content, dialect),), "raw"


def _message_content(content: JSON, dialect: str) -> tuple[list[AnyPart], Form]:
    if isinstance(content, list):
        return [_block(b, dialect) for b in content], "list"
    parts, form = read_content(content, dialect)
    return list(parts), form


def read_content_part(block: JSON, dialect: str) -> ContentPart:
    """Text, an image or document reference, or an uninterpreted block."""
    if not isinstance(block, dict):
        return Opaque(block, dialect)
    kind = block.get("type", "")
    if (kind in _TEXT_KINDS or kind == "") and isinstance(block.get("text"), str):
        rest = {k: v for k, v in block.items() if k not in ("type", "text")}
        return Text(block["text"], kind=str(kind), extra=rest)
    found = media.kind_of(block)
    if found is not None:
        return Media(found, block, dialect)
    return Opaque(block, dialect)


def _block(block: JSON, dialect: str) -> AnyPart:
    if not isinstance(block, dict):
        return Opaque(block, dialect)
    kind = block.get("type")
    if (
        kind == "tool_use"
        and isinstance(block.get("id"), str)
        and isinstance(block.get("name"), str)
    ):
        rest = {k: v for k, v in block.items() if k not in ("type", "id", "name", "input")}
        return ToolCall(block["id"], block["name"], block.get("input"), kind=ANTHROPIC, extra=rest)
    if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
        rest = {
            k: v
            for k, v in block.items()
            if k not in ("type", "tool_use_id", "content", "is_error")
        }
        if "is_error" in block:
            rest["_is_error"] = block["is_error"]
        parts, form = read_content(block.get("content", ABSENT), dialect)
        return ToolResult(
            block["tool_use_id"],
            parts,
            is_error=block.get("is_error") is True,
            form=form,
            kind=ANTHROPIC,
            extra=rest,
        )
    if kind in _THINKING:
        return Reasoning(block, ANTHROPIC)
    return read_content_part(block, dialect)


def _chat_call(call: JSON) -> AnyPart:
    if not isinstance(call, dict):
        return Opaque(call, CHAT)
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return Opaque(call, CHAT)
    raw = function.get("arguments")
    rest = {k: v for k, v in call.items() if k not in ("id", "function")}
    inner = {k: v for k, v in function.items() if k not in ("name", "arguments")}
    if inner:
        rest["_function"] = inner
    return ToolCall(
        id=str(call.get("id", "")),
        name=function["name"],
        arguments=parse_arguments(raw),
        raw_arguments=raw if isinstance(raw, str) else None,
        kind=CHAT,
        extra=rest if "arguments" in function else {**rest, "_no_arguments": True},
    )


def parse_arguments(raw: JSON) -> JSON:
    """Arguments as JSON values (OpenAI sends JSON text; Anthropic an object)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


# -- writing ---------------------------------------------------------------------------


def to_chat(conversation: Conversation) -> dict[str, Any]:
    """The conversation as a chat completions request."""
    body: dict[str, Any] = dict(conversation.params)
    messages: list[JSON] = []
    if conversation.system:
        messages.append({"role": "system", "content": conversation.system_text()})
    for message in conversation.messages:
        messages.extend(_chat_messages(message))
    body["messages"] = messages
    if conversation.tools:
        body["tools"] = [_chat_tool(t) for t in conversation.tools]
    return body


def _chat_tool(tool: Tool) -> JSON:
    if tool.kind == "chat":
        function: dict[str, Any] = {"name": tool.name}
        has = set(tool.extra.get("has", ()))
        if "description" in has:
            function["description"] = tool.description
        if "parameters" in has:
            function["parameters"] = tool.parameters
        function.update(tool.extra.get("function", {}))
        return {"type": "function", "function": function, **tool.extra.get("outer", {})}
    if tool.kind == "raw":
        return tool.extra.get("raw")
    function = {"name": tool.name, "parameters": tool.parameters or {"type": "object"}}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _chat_messages(message: Message) -> list[JSON]:
    if message.form == "raw" and message.role == "?":
        return [p.block for p in message.parts if isinstance(p, Opaque)]
    results = message.tool_results()
    if results and all(r.kind == CHAT for r in results) and len(message.parts) == 1:
        result = results[0]
        out = {"role": "tool", "tool_call_id": result.call_id, **message.extra}
        out["content"] = _chat_content(result.parts, result.form)
        if result.form == "absent":
            del out["content"]
        return [out]
    if results:
        return _chat_results(message)
    extra = {k: v for k, v in message.extra.items() if k != "_role"}
    out = {"role": _chat_role(message.role)}
    reasoning = [p for p in message.parts if isinstance(p, Reasoning) and p.dialect == CHAT]
    content = [p for p in message.parts if isinstance(p, Text | Media | Opaque)]
    if message.form != "absent":
        out["content"] = _chat_content(tuple(content), message.form)
    out.update(extra)
    calls = message.tool_calls()
    if calls:
        out["tool_calls"] = [_chat_call_out(c) for c in calls]
    for part in reasoning:
        out["reasoning_content"] = part.block["reasoning_content"]
    return [out]


def _chat_role(role: str) -> str:
    return role


def _chat_results(message: Message) -> list[JSON]:
    out: list[JSON] = []
    for part in message.parts:
        if isinstance(part, ToolResult):
            content = _chat_content(part.parts, "string" if part.form == "string" else "list")
            out.append({"role": "tool", "tool_call_id": part.call_id, "content": content})
        elif isinstance(part, Text):
            out.append({"role": "user", "content": part.text})
    return out


def _chat_content(parts: tuple[AnyPart, ...], form: Form) -> JSON:
    if form == "none":
        return None
    texts = [p for p in parts if isinstance(p, Text)]
    if form == "string" and len(parts) == len(texts):
        return "".join(t.text for t in texts)
    if form == "raw" and len(parts) == 1 and isinstance(parts[0], Opaque):
        return parts[0].block
    out: list[JSON] = []
    for part in parts:
        if isinstance(part, Text):
            kind = part.kind if part.kind in ("", "text") else "text"
            block = {"type": kind, "text": part.text, **_own(part, CHAT)}
            if kind == "":
                del block["type"]
            out.append(block)
        elif isinstance(part, Media):
            out.append(media.to_chat(part))
        elif isinstance(part, Opaque):
            out.append(part.block if part.dialect == CHAT else _described(part))
    if form == "string":
        return "".join(b.get("text", "") for b in out if isinstance(b, dict))
    return out


def _own(part: Text, dialect: str) -> dict[str, JSON]:
    """A text part's extra keys: kept within its family of dialects only."""
    if dialect == CHAT and part.kind in ("input_text", "output_text"):
        return {}
    return dict(part.extra)


def _described(part: Opaque) -> JSON:
    return {"type": "text", "text": json.dumps(part.block, ensure_ascii=False)}


def _chat_call_out(call: ToolCall) -> JSON:
    if call.kind == CHAT:
        extra = dict(call.extra)
        inner = extra.pop("_function", {})
        no_arguments = extra.pop("_no_arguments", False)
        function: dict[str, Any] = {"name": call.name, **inner}
        if not no_arguments:
            function["arguments"] = (
                call.raw_arguments if call.raw_arguments is not None else call.arguments
            )
        out: dict[str, Any] = {"id": call.id, "function": function, **extra}
        return out
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_text()},
    }


def to_anthropic(conversation: Conversation) -> dict[str, Any]:
    """The conversation as an Anthropic messages request."""
    body: dict[str, Any] = dict(conversation.params)
    system = list(conversation.system)
    messages: list[JSON] = []
    for message in conversation.messages:
        # Anthropic's own system messages stay where they are; another dialect's
        # system and developer prompts join the system field
        if message.role in ("system", "developer") and conversation.dialect != ANTHROPIC:
            system.extend(p for p in message.parts if isinstance(p, Text))
            continue
        messages.append(_anthropic_message(message))
    if conversation.system_field == "system" or system:
        body["system"] = _anthropic_system(tuple(system), conversation)
    body["messages"] = messages
    if conversation.tools:
        body["tools"] = [_anthropic_tool(t) for t in conversation.tools]
    return body


def _anthropic_system(system: tuple[Text, ...], conversation: Conversation) -> JSON:
    same = conversation.system_field == "system" and system == conversation.system
    if same and conversation.system_form == "raw":
        return json.loads(system[0].text)
    if same and conversation.system_form == "string":
        return system[0].text
    if not same:  # several system prompts: one text block each (empty ones are refused)
        return [{"type": "text", "text": p.text} for p in system if p.text]
    return [{"type": "text", "text": p.text, **p.extra} for p in system]


def _anthropic_tool(tool: Tool) -> JSON:
    if tool.kind == "anthropic":
        out: dict[str, Any] = {"name": tool.name}
        has = set(tool.extra.get("has", ()))
        if "description" in has:
            out["description"] = tool.description
        out["input_schema"] = tool.parameters
        out.update(tool.extra.get("rest", {}))
        return out
    if tool.kind == "raw":
        return tool.extra.get("raw")
    out = {"name": tool.name, "input_schema": tool.parameters or {"type": "object"}}
    if tool.description is not None:
        out["description"] = tool.description
    return out


def _anthropic_message(message: Message) -> JSON:
    if message.form == "raw" and message.role == "?":
        return next((p.block for p in message.parts if isinstance(p, Opaque)), None)
    extra = dict(message.extra)
    role = extra.pop("_role", None) or ("user" if message.role == "tool" else message.role)
    out: dict[str, Any] = {"role": role}
    plain = all(isinstance(p, Text | Opaque) for p in message.parts)
    if message.form in ("string", "none", "raw") and plain:
        out["content"] = _chat_content(message.parts, message.form)
    elif message.form != "absent" or message.parts:
        out["content"] = [_anthropic_block(p) for p in message.parts]
    out.update({k: v for k, v in extra.items() if k not in ("tool_call_id", "name")})
    return out


def _anthropic_block(part: AnyPart) -> JSON:
    if isinstance(part, Text):
        if part.kind == "":
            return {"text": part.text, **part.extra}
        return {"type": "text", "text": part.text, **_own(part, ANTHROPIC)}
    if isinstance(part, ToolCall):
        extra = part.extra if part.kind == ANTHROPIC else {}
        arguments = (
            part.arguments
            if isinstance(part.arguments, dict) or part.kind == ANTHROPIC
            else {"input": part.arguments}
        )
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": arguments, **extra}
    if isinstance(part, ToolResult):
        extra = dict(part.extra) if part.kind == ANTHROPIC else {}
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.call_id}
        if part.form != "absent":
            out["content"] = (
                _chat_content(part.parts, part.form)
                if part.form != "list"
                else [_anthropic_block(p) for p in part.parts]
            )
        if "_is_error" in extra:
            out["is_error"] = extra.pop("_is_error")
        elif part.is_error:
            out["is_error"] = True
        out.update(extra)
        return out
    if isinstance(part, Reasoning):
        if part.dialect == ANTHROPIC:
            return part.block
        return {"type": "text", "text": part.text()}
    if isinstance(part, Media):
        return media.to_anthropic(part)
    if part.dialect in (ANTHROPIC, CHAT):
        return part.block
    return _described(part)
