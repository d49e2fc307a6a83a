"""The sealed body's envelope: compressed by default, and records sealed before the
envelope existed (bare UTF-8) still open."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from reef.core.events import InferenceRecorded
from reef.core.sealed import sealed_copy
from reef.crypto import SealError, body_aad, new_data_key, open_sealed, seal
from reef.crypto.bodies import open_exchange, open_trajectory, seal_exchange
from reef.crypto.envelope import MANIFEST, Manifest, unwrap, wrap_manifest, wrap_text
from reef_dev.agent_session import AgentSession
from reef_dev.events import chat_request, chat_response, inference

CARD = "4111 1111 1111 1111"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def exchange(record_id: str, request: Any = None, response: str = "ok") -> InferenceRecorded:
    return inference(
        "s",
        record_id,
        AT,
        request=request if request is not None else chat_request([]),
        response=chat_response(response),
    )


def test_a_compressed_body_is_smaller_and_opens_to_the_same_text() -> None:
    key = new_data_key()
    body = AgentSession().body().decode()
    event = replace(exchange("rec-1"), request_json=body)
    sealed = seal_exchange(event, key)
    plain = seal_exchange(event, key, compress=False)
    assert sealed.request_sealed is not None and plain.request_sealed is not None
    assert len(sealed.request_sealed) * 3 < len(plain.request_sealed)
    assert open_exchange(sealed, key).request_json == body
    assert open_exchange(plain, key).request_json == body


def test_a_record_sealed_before_the_envelope_still_opens() -> None:
    key = new_data_key()
    event = exchange("rec-old", chat_request([{"role": "user", "content": "héllo"}]), "answer")
    old = seal_exchange(event, key, compress=False)
    assert old.request_sealed is not None
    # the old format: the bare UTF-8 text under the key
    assert (
        open_sealed(key, old.request_sealed, body_aad("s", "rec-old", "request"))
        == (event.request_json or "").encode()
    )
    opened = open_exchange(old, key)
    assert opened.request_json == event.request_json
    assert opened.response_json == event.response_json


def test_a_trajectory_opens_both_formats() -> None:
    key = new_data_key()
    old = seal_exchange(exchange("r-old", chat_request([{"role": "user", "content": "a"}])), key)
    new = seal_exchange(
        exchange("r-new", chat_request([{"role": "user", "content": "b"}])), key, compress=False
    )
    trajectory = [
        {"receipt": e.event_id, "request": sealed_copy(e.request_sealed, None)} for e in (old, new)
    ]
    opened, complete = open_trajectory(trajectory, "s", {"r-old": key, "r-new": key})
    assert complete
    assert [t["request"]["messages"][0]["content"] for t in opened] == ["a", "b"]


def test_envelope_kinds_are_told_apart() -> None:
    assert unwrap(b'{"a": 1}') == '{"a": 1}'
    assert unwrap(wrap_text("é" * 1000)) == "é" * 1000
    assert unwrap(wrap_manifest(b"{}")) == Manifest(b"{}")
    with pytest.raises(SealError):
        unwrap(b"\x00?" + b"rest")
    with pytest.raises(SealError):
        unwrap(MANIFEST + b"not zstd")
    with pytest.raises(SealError):
        unwrap(b"\xff\xfe")


def test_a_manifest_body_needs_the_body_store() -> None:
    key = new_data_key()
    sealed = seal_exchange(exchange("rec-1"), key, request=wrap_manifest(json.dumps({}).encode()))
    with pytest.raises(SealError, match="body store"):
        open_exchange(sealed, key)


def test_the_seal_still_hides_the_compressed_text() -> None:
    key = new_data_key()
    blob = seal(key, wrap_text(CARD * 10), b"aad")
    assert CARD.encode() not in blob
    assert unwrap(open_sealed(key, blob, b"aad")) == CARD * 10
