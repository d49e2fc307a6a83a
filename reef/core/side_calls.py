"""Side calls: requests an agent sends beside its conversation, told by their shape.

An agent CLI asks its model for more than the conversation's next step: a title for the
chat, a one-token quota probe, a warm-up, a summary of the history to compact it. Such
a call is never a turn of its session: it neither opens one nor binds the previous turn
(which would teach a judge that "write a title" was the user's reply). Session matching
cannot read bodies (they are sealed), so the API classifies the request here, where the
body is at hand, and records the kind as tags (``turn-type: side``, ``side-kind``).

Kinds, first match wins:

* ``compaction``: Codex marks it (``x-openai-subagent: compact``, turn metadata
  ``request_kind: compaction``, or a Responses input ending in a ``compaction_trigger``
  item); Claude Code's summariser has its own system prompt (``... tasked with
  summarizing conversations``) or, sharing the main conversation's prefix, ends the
  history with the summary instruction (``... create a detailed summary of the
  conversation so far``);
* ``memory`` and ``prewarm``: Codex's turn metadata ``request_kind`` (or
  ``x-openai-subagent: memory_consolidation``);
* ``title``: Claude Code's session-title and topic prompts, in the system prompt;
* ``quota``: one user message ``quota`` with ``max_tokens: 1`` (Claude Code's probe);
* ``warmup``: one user message ``Warmup`` (Claude Code warms its agents' caches).

A request none of these match is left to the session rules (a request without tool
schemas in an agent's session is a side call there, of kind ``no-tools``).

After a compaction Claude Code goes on with a shortened history whose first user message
says so (``This session is being continued from a previous conversation ...``):
:func:`history_tags` marks such a request ``history: compacted``, so session matching
keeps it in the agent's own conversation even if its system prompt changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

TURN_TYPE_TAG: Final = "turn-type"
SIDE_KIND_TAG: Final = "side-kind"
HISTORY_TAG: Final = "history"

_CODEX_KINDS: Final = {"compaction": "compaction", "memory": "memory", "prewarm": "prewarm"}
_CODEX_SUBAGENTS: Final = {"compact": "compaction", "memory_consolidation": "memory"}
_SUMMARISER_SYSTEM: Final = "tasked with summarizing conversations"
_SUMMARY_INSTRUCTION: Final = "create a detailed summary of the conversation so far"
_CONTINUATION: Final = "This session is being continued from a previous conversation"
_TITLE_SYSTEM: Final = (
    "naming a coding session",
    "indicates a new conversation topic",
    "word title for the following conversation",
    "sentence-case title",
)
#: how much of the head of each text part is read for a marker: the markers open their
#: prompt or instruction (a line or two in at most), and an agent's main system prompt
#: (tens of KB) is never read whole
_HEAD: Final = 1024


def side_kind(body: Any, tags: Mapping[str, str]) -> str | None:
    """The kind of side call ``body`` (with the agent's ``tags``) is; None: not one."""
    kind = _CODEX_KINDS.get(tags.get("request-kind", "")) or _CODEX_SUBAGENTS.get(
        tags.get("subagent", "")
    )
    if kind is not None:
        return kind
    if not isinstance(body, dict):
        return None
    system = "\n".join([*_heads(body.get("system")), *_heads(body.get("instructions"))])
    last = _last_item(body)
    if _SUMMARISER_SYSTEM in system or _is_trigger(last):
        return "compaction"
    if _opens_with(_content(last), _SUMMARY_INSTRUCTION):
        return "compaction"
    if any(marker in system for marker in _TITLE_SYSTEM):
        return "title"
    return _probe(body, last)


def side_tags(kind: str) -> dict[str, str]:
    """The tags a side call of ``kind`` is recorded with."""
    return {TURN_TYPE_TAG: "side", SIDE_KIND_TAG: kind}


def history_tags(body: Any) -> dict[str, str]:
    """``history: compacted`` when the first user message says the history was summarised."""
    items = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return {}
    first = next((m for m in items if isinstance(m, dict) and m.get("role") == "user"), None)
    return {HISTORY_TAG: "compacted"} if _opens_with(_content(first), _CONTINUATION) else {}


def _probe(body: dict[str, Any], last: Any) -> str | None:
    """``quota`` or ``warmup``: a conversation of one user message with that text."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if not isinstance(items, list) or len(items) != 1:
        return None
    text = _text(_content(last)).strip()
    if text == "quota" and body.get("max_tokens") == 1:
        return "quota"
    return "warmup" if text == "Warmup" else None


def _last_item(body: dict[str, Any]) -> Any:
    for key in ("messages", "input"):
        items = body.get(key)
        if isinstance(items, list) and items:
            return items[-1]
    return None


def _is_trigger(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "compaction_trigger"


def _content(item: Any) -> Any:
    return item.get("content") if isinstance(item, dict) else None


def _opens_with(content: Any, marker: str) -> bool:
    """Whether a text part of ``content`` holds ``marker`` (or it capitalised) near its
    head. No case folding: lowering a non-ASCII text costs more than the request."""
    forms = (marker, marker[:1].upper() + marker[1:])
    return any(form in head for head in _heads(content) for form in forms)


def _heads(content: Any) -> list[str]:
    """The head of each text part of a string or a list of blocks."""
    parts = [content] if isinstance(content, str) else content
    if not isinstance(parts, list):
        return []
    texts = (part.get("text") if isinstance(part, dict) else part for part in parts)
    return [text[:_HEAD] for text in texts if isinstance(text, str)]


def _text(content: Any) -> str:
    """The text of a string or of a list of text blocks (other blocks skipped)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        block["text"]
        for block in content
        if isinstance(block, dict) and isinstance(block.get("text"), str)
    )
