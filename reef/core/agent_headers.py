"""Agent headers: the session ids agent CLIs send, read as the exchange's tags.

Agent CLIs name their own sessions in request headers. Read as tags (the same names an
``x-reef-tag-<name>`` header would set), they let session matching bind an agent's
turns by the agent's word instead of by transcript, which a compaction (the history
summarised) or a subagent (another conversation under the same session) would defeat.

* ``x-claude-code-session-id`` (Claude Code): ``session``, the session's UUID;
* ``x-claude-code-agent-id`` (Claude Code, a subagent's requests only): ``thread``;
* ``session-id``, ``session_id``, ``conversation_id`` (Codex, newest to oldest
  releases): ``session``;
* ``thread-id`` (Codex): ``thread``, the conversation the request belongs to;
* ``x-codex-parent-thread-id`` (Codex): ``parent-thread``, the thread that spawned it;
* ``x-openai-subagent`` (Codex): ``subagent`` (``compact``, ``review``, ...);
* ``x-codex-turn-metadata`` (Codex, JSON): ``session_id`` -> ``session``, ``thread_id``
  -> ``thread``, ``parent_thread_id`` -> ``parent-thread``, ``turn_id`` -> ``turn-id``,
  ``request_kind`` -> ``request-kind``.

Claude Code says one more thing, in the body: the billing line that opens a subagent's
system prompt (``x-anthropic-billing-header: ...; cc_is_subagent=true;``) marks its
requests ``subagent: true`` (:func:`body_tags`).

The first header present fills a tag (a dedicated header before the JSON metadata). A
session taken from an agent header is marked ``session-source: <agent>``, so session
matching knows the agent, not the client, named it. The caller merges the client's own
``x-reef-tag-*`` tags over these: an explicit ``x-reef-tag-session`` always wins (and
then no ``session-source`` is recorded). Values that are not short printable strings
are ignored: an id, not a payload, is what a tag holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

SESSION_SOURCE_TAG: Final = "session-source"
SUBAGENT_TAG: Final = "subagent"
BILLING_LINE: Final = "x-anthropic-billing-header:"
SUBAGENT_MARK: Final = "cc_is_subagent=true"
TURN_METADATA_HEADER: Final = "x-codex-turn-metadata"
MAX_VALUE_CHARS: Final = 256


@dataclass(frozen=True, slots=True)
class AgentHeader:
    """One header an agent sends and the tag it becomes."""

    header: str
    agent: str
    tag: str


#: in precedence order within each tag (the first present wins)
AGENT_HEADERS: Final = (
    AgentHeader("x-claude-code-session-id", "claude-code", "session"),
    AgentHeader("session-id", "codex", "session"),
    AgentHeader("session_id", "codex", "session"),
    AgentHeader("conversation_id", "codex", "session"),
    AgentHeader("x-claude-code-agent-id", "claude-code", "thread"),
    AgentHeader("thread-id", "codex", "thread"),
    AgentHeader("x-codex-parent-thread-id", "codex", "parent-thread"),
    AgentHeader("x-openai-subagent", "codex", "subagent"),
)

#: fields of Codex's turn metadata JSON and the tags they fill when no header did
TURN_METADATA_FIELDS: Final = {
    "session_id": "session",
    "thread_id": "thread",
    "parent_thread_id": "parent-thread",
    "turn_id": "turn-id",
    "request_kind": "request-kind",
}


def agent_tags(get: Callable[[str], str | None]) -> dict[str, str]:
    """The tags the agent headers of one request give (``get``: a header by its
    lowercase name, as ``request.headers.get``)."""
    tags: dict[str, str] = {}
    source: str | None = None
    for row in AGENT_HEADERS:
        value = _clean(get(row.header))
        if value is None or row.tag in tags:
            continue
        tags[row.tag] = value
        if row.tag == "session":
            source = row.agent
    for tag, value in _turn_metadata(get(TURN_METADATA_HEADER)).items():
        if tag not in tags:
            tags[tag] = value
            if tag == "session":
                source = "codex"
    if source is not None:
        tags[SESSION_SOURCE_TAG] = source
    return tags


def body_tags(body: Any) -> dict[str, str]:
    """``subagent: true`` for a Claude Code subagent's request (its system prompt opens
    with a billing line that says so); nothing else is read from the body."""
    system = body.get("system") if isinstance(body, dict) else None
    first = system[0] if isinstance(system, list) and system else None
    line = first.get("text") if isinstance(first, dict) else None
    if isinstance(line, str) and line.startswith(BILLING_LINE) and SUBAGENT_MARK in line[:512]:
        return {SUBAGENT_TAG: "true"}
    return {}


def with_explicit(derived: Mapping[str, str], explicit: Mapping[str, str]) -> dict[str, str]:
    """``explicit`` (the client's ``x-reef-tag-*``) over ``derived``; a session the
    client named is not the agent's, so its ``session-source`` goes."""
    merged = {**derived, **explicit}
    if "session" in explicit and SESSION_SOURCE_TAG not in explicit:
        merged.pop(SESSION_SOURCE_TAG, None)
    return merged


def _turn_metadata(raw: str | None) -> dict[str, str]:
    """``{tag: value}`` read from Codex's turn metadata JSON; nothing if it is not JSON."""
    if not raw or len(raw) > 64 * 1024:
        return {}
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return {}
    if not isinstance(meta, dict):
        return {}
    found: dict[str, str] = {}
    for field, tag in TURN_METADATA_FIELDS.items():
        value = _clean(meta.get(field))
        if value is not None:
            found[tag] = value
    return found


def _clean(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > MAX_VALUE_CHARS or not value.isprintable():
        return None
    return value
