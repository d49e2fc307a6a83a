"""A request body's top-level members in its own bytes, changed without re-serialising it.

Reef relays a client's body to the provider as the bytes it received. When it must set a
member (the deployment's forced ``model``, the token record a recipe asks for, an
engine's ``lora_path``), :func:`with_members` rewrites only that member's value and
leaves every other byte as sent: the ``system`` prompt, the ``tools`` and the
``cache_control`` markers a provider's prompt cache keys on reach it unchanged, whatever
whitespace, key order or escapes the client chose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def member_spans(raw: bytes) -> dict[str, tuple[int, int]]:
    """Each top-level member's value as a byte range ``raw[start:end]`` (a repeated key:
    its last value, the one a JSON reader keeps). ``ValueError`` unless ``raw`` is a
    JSON object in UTF-8."""
    text = raw.decode("utf-8")
    spans, _ = _spans(text)
    return {key: (_byte(text, start), _byte(text, end)) for key, (start, end) in spans.items()}


def with_members(raw: bytes, members: Mapping[str, Any]) -> bytes:
    """``raw`` with ``members`` set: a present member's value replaced where it stands,
    an absent one appended; every other byte unchanged. A body that is not a JSON object
    in UTF-8 is re-serialised whole (JSON's other encodings: nothing to keep)."""
    try:
        text = raw.decode("utf-8")
        spans, close = _spans(text)
    except ValueError:
        return json.dumps({**json.loads(raw), **members}).encode()
    added = [
        f"{json.dumps(key)}: {json.dumps(value)}"
        for key, value in members.items()
        if key not in spans
    ]
    if added:
        text = text[:close] + ("," if spans else "") + ", ".join(added) + text[close:]
    replaced = sorted((spans[k], v) for k, v in members.items() if k in spans)
    for (start, end), value in reversed(replaced):
        text = text[:start] + json.dumps(value) + text[end:]
    return text.encode("utf-8")


def _spans(text: str) -> tuple[dict[str, tuple[int, int]], int]:
    """(value spans by key, the index of the closing brace) of a top-level object."""
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        raise ValueError("not a JSON object")
    at = _skip(text, at + 1)
    spans: dict[str, tuple[int, int]] = {}
    if text[at : at + 1] == "}":
        return spans, _closed(text, at)
    while True:
        if text[at : at + 1] != '"':
            raise ValueError(f"a member name expected at {at}")
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at : at + 1] != ":":
            raise ValueError(f"':' expected at {at}")
        start = _skip(text, at + 1)
        _, end = _DECODER.raw_decode(text, start)
        spans[key] = (start, end)
        at = _skip(text, end)
        if text[at : at + 1] == "}":
            return spans, _closed(text, at)
        if text[at : at + 1] != ",":
            raise ValueError(f"',' or '}}' expected at {at}")
        at = _skip(text, at + 1)


def _closed(text: str, brace: int) -> int:
    if _skip(text, brace + 1) != len(text):
        raise ValueError("data after the JSON object")
    return brace


def _skip(text: str, at: int) -> int:
    found = _WHITESPACE.match(text, at)
    return at if found is None else found.end()


def _byte(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))
