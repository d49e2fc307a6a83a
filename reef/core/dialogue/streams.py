"""Streams as Reef records them, assembled back into the buffered response they stand for.

Reef records a relayed stream as ``{"stream": true, "message": ..., "sse": <the events
as received>, "response": <the Responses API's final object, when sent>}``. The
``sse`` text holds everything the model said (text, tool calls, thinking), so the
buffered equivalent is rebuilt from it here: a chat completion from chunks, an
Anthropic message from its content-block events. Unparseable events are skipped.
"""

from __future__ import annotations

import json
from typing import Any

from reef.core.dialogue.model import JSON


def events(sse: str) -> list[tuple[str | None, JSON]]:
    """``(event name, parsed data)`` of each event block (``[DONE]`` and junk skipped)."""
    out: list[tuple[str | None, JSON]] = []
    for block in sse.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[6:] if line[5:6] == " " else line[5:])
        if not data:
            continue
        try:
            out.append((name, json.loads("\n".join(data))))
        except ValueError:
            continue
    return out


def chat_completion(sse: str) -> dict[str, Any] | None:
    """The chat completion a chunk stream stands for (first choice; None: no chunks)."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    text: list[str] = []
    reasoning: list[str] = []
    finish = None
    seen = False
    for _, chunk in events(sse):
        if not isinstance(chunk, dict) or chunk.get("object") != "chat.completion.chunk":
            continue
        seen = True
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                reasoning.append(delta["reasoning_content"])
            for piece in delta.get("tool_calls") or []:
                if isinstance(piece, dict):
                    _call_delta(calls, piece)
    if not seen:
        return None
    if text:
        message["content"] = "".join(text)
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def _call_delta(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    index = piece.get("index", 0)
    index = index if isinstance(index, int) else 0
    call = calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if isinstance(piece.get("id"), str):
        call["id"] = piece["id"]
    function = piece.get("function") or {}
    if isinstance(function.get("name"), str):
        call["function"]["name"] += function["name"]
    if isinstance(function.get("arguments"), str):
        call["function"]["arguments"] += function["arguments"]


def anthropic_message(sse: str) -> dict[str, Any] | None:
    """The Anthropic message an event stream stands for (None: no ``message_start``)."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for _, event in events(sse):
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = dict(event["message"])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[_index(event)] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            _block_delta(
                blocks.setdefault(_index(event), {"type": "text", "text": ""}),
                partial.setdefault(_index(event), []),
                event["delta"],
            )
        elif kind == "message_delta" and message is not None:
            delta = event.get("delta")
            if isinstance(delta, dict):
                message.update({k: v for k, v in delta.items() if v is not None})
    if message is None:
        return None
    for index, pieces in partial.items():
        if pieces and blocks.get(index, {}).get("type") in ("tool_use", "server_tool_use"):
            try:
                blocks[index]["input"] = json.loads("".join(pieces))
            except ValueError:
                blocks[index]["input"] = "".join(pieces)
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _index(event: dict[str, Any]) -> int:
    index = event.get("index", 0)
    return index if isinstance(index, int) else 0


def _block_delta(block: dict[str, Any], partial: list[str], delta: dict[str, Any]) -> None:
    kind = delta.get("type")
    if kind == "text_delta" and isinstance(delta.get("text"), str):
        block["text"] = str(block.get("text", "")) + delta["text"]
    elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
        partial.append(delta["partial_json"])
    elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
        block["thinking"] = str(block.get("thinking", "")) + delta["thinking"]
    elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
        block["signature"] = delta["signature"]
    elif kind == "citations_delta" and isinstance(delta.get("citation"), dict):
        block.setdefault("citations", []).append(delta["citation"])


def responses_object(sse: str) -> dict[str, Any] | None:
    """The final response of a Responses stream: ``response.completed``'s object, or the
    output items announced done when the stream ended early."""
    items: dict[int, JSON] = {}
    for _, event in events(sse):
        if not isinstance(event, dict):
            continue
        final = event.get("type") in (
            "response.completed",
            "response.incomplete",
            "response.failed",
        )
        if final and isinstance(event.get("response"), dict):
            return dict(event["response"])
        if event.get("type") == "response.output_item.done" and isinstance(event.get("item"), dict):
            index = event.get("output_index", len(items))
            items[index if isinstance(index, int) else len(items)] = event["item"]
    if not items:
        return None
    return {"object": "response", "output": [items[i] for i in sorted(items)]}
