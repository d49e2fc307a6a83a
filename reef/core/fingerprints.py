"""Message fingerprints: what session matching needs from a sealed exchange, and no more.

Bodies are sealed (and may be claim-checked) before they reach the log, so a processor
cannot read the messages it would compare. The API therefore records, beside the sealed
bodies, one fingerprint per request message and one for the response's assistant
message (``InferenceRecorded.message_fingerprints`` / ``answer_fingerprint``), while the
deployment tracks or merges sessions (``REEF_TRACK_SESSIONS``, ``REEF_MERGE_SESSIONS``;
both off, nothing is computed).

A fingerprint is ``<role>:<32 hex>``: the role in clear (matching needs it, and it says
nothing about the content), then HMAC-SHA256 over the canonical message, truncated to
128 bits. The canonical message is (role, the text of its text parts, its tool calls as
(name, arguments)); tool-call ids, images and other non-text parts, and reasoning items
are ignored, so both dialects, string and block content, and a client that rewrites
call ids compare equal. A tool result is role ``tool`` in either dialect (Anthropic
sends it as a ``user`` message of ``tool_result`` blocks).

The HMAC key is per scenario, derived from a deployment secret
(``REEF_FINGERPRINT_SECRET``): :func:`scenario_key`. Equal messages therefore have equal
fingerprints only within one scenario of one deployment, and someone who reads the log
without the secret cannot test a guessed message ("yes", "thanks") against them, nor
link an erased record's messages to anything: the fingerprints stay on the log after an
erasure destroys the record's data key, and carry no content. Without a secret the key
is derived from the scenario name alone: matching works the same, but guesses can be
confirmed by anyone with log access (docs/architecture.md, "Sessions and turns").
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from reef.core.dialogue import canonical

_KEY_LABEL = b"reef-fingerprint-v1/"


def scenario_key(secret: bytes, scenario: str) -> bytes:
    """The HMAC key of one scenario's fingerprints."""
    return hmac.new(secret, _KEY_LABEL + scenario.encode(), hashlib.sha256).digest()


def fingerprint(key: bytes, message: list[Any]) -> str:
    """``<role>:<hmac>`` of one canonical message (see :func:`canonical_messages`)."""
    encoded = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hmac.new(key, encoded.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{message[0]}:{digest}"


def role_of(fp: str) -> str:
    return fp.rpartition(":")[0]


def request_fingerprints(key: bytes, request: Any) -> list[str] | None:
    """One fingerprint per message of the request; None when it carries no conversation."""
    messages = canonical_messages(request)
    if messages is None:
        return None
    return [fingerprint(key, m) for m in messages]


def answer_fingerprint(key: bytes, response: Any) -> str | None:
    """The fingerprint of the assistant message a response gave (None: none found)."""
    message = canonical_answer(response)
    return None if message is None else fingerprint(key, message)


def has_tools(request: Any) -> bool:
    """Whether the request offers tool schemas (an agent's main turn does)."""
    return isinstance(request, dict) and bool(request.get("tools"))


# -- canonical forms: the conversation model's (reef.core.dialogue.canonical) ---------

canonical_messages = canonical.canonical_messages
canonical_answer = canonical.canonical_answer
