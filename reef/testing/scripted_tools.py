"""Tool calls the scripted upstream answers with, in the three dialects it speaks.

A prompt scripts a tool call with a directive, the tool's name and its arguments as one
JSON object::

    Call tool Write with {"file_path": "/tmp/w/hello.txt", "content": "hi"} Return exactly: done

The first request of that turn is answered with a call of ``Write`` and those arguments.
Once the request carries the tool's result (an Anthropic ``tool_result`` block, a
Responses ``function_call_output`` item, a chat ``role: tool`` message after the prompt),
the next directive is answered, and when none is left the prompt's text is (``done``
here). The directives are removed from the text before answering; one whose arguments
are not a JSON object is no directive and stays in the text.

This module holds the pure parts: the directives, the turn a request is in, and each
dialect's body, deltas and events for one call; :mod:`reef.testing.scripted_upstream`
frames and sends them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

_DIRECTIVE: Final = re.compile(r"Call tool ([A-Za-z0-9_.:-]+) with ")
_RESULT_ITEMS: Final = frozenset({"function_call_output", "custom_tool_call_output"})
_DECODER: Final = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One scripted call: the tool's name and its arguments as compact JSON text."""

    name: str
    arguments: str

    @property
    def input(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.arguments)
        return parsed

    def pieces(self) -> list[str]:
        """The arguments as stream deltas (16 characters each)."""
        return re.findall(r".{1,16}", self.arguments, re.S) or [self.arguments]


def split_calls(prompt: str) -> tuple[str, tuple[ToolCall, ...]]:
    """The prompt without its directives, and the calls they script, in order."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    position = 0
    for match in _DIRECTIVE.finditer(prompt):
        if match.start() < position:
            continue  # inside the arguments of the directive before
        try:
            arguments, end = _DECODER.raw_decode(prompt, match.end())
        except json.JSONDecodeError:
            continue
        if not isinstance(arguments, dict):
            continue
        calls.append(ToolCall(match.group(1), json.dumps(arguments, separators=(",", ":"))))
        kept.append(prompt[position : match.start()])
        position = end
    kept.append(prompt[position:])
    return "".join(kept), tuple(calls)


def has_directive(prompt: str) -> bool:
    return bool(split_calls(prompt)[1])


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _results_in(item: dict[str, Any]) -> int:
    """How many tool results one conversation item carries."""
    if item.get("type") in _RESULT_ITEMS or item.get("role") == "tool":
        return 1
    content = item.get("content")
    if item.get("role") != "user" or not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")


def tool_turn(items: Any) -> tuple[str, int]:
    """The text of the last user message that is not a tool result, and how many tool
    results follow it (a chat / messages list or a Responses ``input``)."""
    if isinstance(items, str):
        return items, 0
    results = 0
    for item in reversed(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        carried = _results_in(item)
        if carried:
            results += carried
        elif item.get("role") == "user" and item.get("type", "message") == "message":
            return _text_of(item.get("content")), results
    return "", results


# ---------------------------------------------------------------------------
# One call in each dialect (``number`` makes the ids unique per exchange)


def chat_message(call: ToolCall, number: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": f"call_stub_{number}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        ],
    }


def chat_deltas(call: ToolCall, number: int) -> list[dict[str, Any]]:
    """The ``delta`` of each streamed chunk, the role's first."""
    opening = {
        "index": 0,
        "id": f"call_stub_{number}",
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": [opening]}]
    deltas += [
        {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]} for piece in call.pieces()
    ]
    return deltas


def anthropic_block(call: ToolCall, number: int, *, streaming: bool = False) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_stub_{number}",
        "name": call.name,
        "input": {} if streaming else call.input,
    }


def anthropic_deltas(call: ToolCall) -> list[dict[str, Any]]:
    return [{"type": "input_json_delta", "partial_json": piece} for piece in call.pieces()]


def response_item(call: ToolCall, number: int, *, done: bool = True) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_stub_{number}",
        "call_id": f"call_stub_{number}",
        "name": call.name,
        "arguments": call.arguments if done else "",
        "status": "completed" if done else "in_progress",
    }


def response_events(call: ToolCall, number: int) -> list[dict[str, Any]]:
    """The events between ``response.in_progress`` and ``response.completed``."""
    where = {"item_id": f"fc_stub_{number}", "output_index": 0}
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": response_item(call, number, done=False),
        }
    ]
    events += [
        {"type": "response.function_call_arguments.delta", **where, "delta": piece}
        for piece in call.pieces()
    ]
    events += [
        {"type": "response.function_call_arguments.done", **where, "arguments": call.arguments},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": response_item(call, number),
        },
    ]
    return events
