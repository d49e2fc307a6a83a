"""Conversation keys for the join's session merging: which exchange a request continues.

An exchange (request messages + the answer) is a prefix of a later request when the
later request's messages start with exactly those messages followed by that answer.
Messages are compared in the conversation model's canonical form
(:mod:`reef.core.dialogue.canonical`: role, text, tool calls), so the dialects,
string and block content, and tool-using turns compare equal.

Bodies reach the join sealed, so a message is compared by the fingerprint the API
recorded for it (:mod:`reef.core.fingerprints`: a keyed hash of that same canonical
form); only a record without fingerprints whose bodies are in clear is compared by
its text. A fingerprint is a string and a canonical message a list, so the two never
share a key.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from reef.core.dialogue import canonical
from reef.core.events import InferenceRecorded


def request_messages(request: Any) -> list[list[Any]]:
    """The conversation a request carries, canonical (empty: it carries none)."""
    return canonical.canonical_messages(request) or []


def answer_message(response: Any) -> list[Any] | None:
    """The first message of the answer a response gave, canonical."""
    return canonical.canonical_answer(response)


def turns_of(event: InferenceRecorded, request: Any, response: Any) -> tuple[list[Any], Any] | None:
    """(the request's messages, the answer or None) as the join compares them: the
    recorded fingerprints, else the clear bodies; None when neither can be read."""
    if event.message_fingerprints is not None:
        return list(event.message_fingerprints), event.answer_fingerprint
    if event.sealed:
        return None
    return request_messages(request), answer_message(response)


def key_of(messages: list[Any]) -> str:
    encoded = json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()[:32]
