"""Identifiers: random receipts, and deterministic ids for derived facts."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import uuid
from json.encoder import encode_basestring
from typing import Any, Final

SCENARIO_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

#: content id of the empty manifest: a scenario created without a seed artifact
EMPTY_CONTENT_ID: Final = hashlib.sha256(b"{}").hexdigest()


def new_record_id() -> str:
    """A fresh receipt / report id: 32 lowercase hex characters."""
    return uuid.uuid4().hex


def new_receipt(scenario: str) -> str:
    """A fresh receipt: 32 hex characters whose first 8 name the scenario's hash.

    The prefix lets the join tell a receipt of another scenario (``foreign_reference``)
    from one never recorded (``unknown_reference``) without a global index.
    """
    return scenario_tag(scenario) + os.urandom(12).hex()  # 96 random bits


@functools.lru_cache(maxsize=4096)  # pure, and asked for on every report the join takes
def scenario_tag(scenario: str) -> str:
    return hashlib.sha256(scenario.encode()).hexdigest()[:8]


#: ``json.dumps`` with these options builds this encoder on every call: built once here
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8: the form hashes are taken over."""
    return _CANONICAL.encode(value)


def content_hash(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def release_id(scenario: str, parent: str | None, content_id: str, operation: str) -> str:
    """A release id is a hash over its scenario, parent, content and operation (tamper-evident)."""
    return content_hash(
        {"scenario": scenario, "parent": parent, "content": content_id, "operation": operation}
    )[:32]


def derived_id(kind: str, *parts: str) -> str:
    """Deterministic id of an event derived from others (same inputs, same id)."""
    if type(kind) is str and all(type(part) is str for part in parts):
        # canonical_json of a list of strings, written directly (the join derives an id
        # for every report it decides); any other part goes the general way
        text = "[" + ",".join(map(encode_basestring, (kind, *parts))) + "]"
        return hashlib.sha256(text.encode()).hexdigest()[:32]
    return content_hash([kind, *parts])[:32]


def valid_scenario(name: str) -> bool:
    return SCENARIO_NAME.fullmatch(name) is not None
