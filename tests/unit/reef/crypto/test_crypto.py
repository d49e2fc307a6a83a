"""The crypto core: AES-256-GCM sealing bound to (scenario, record, part), and the
sealed forms of exchanges and of the trajectories that copy them."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from reef.core.events import InferenceRecorded, utc_now
from reef.core.sealed import sealed_copy
from reef.crypto import SealError, body_aad, new_data_key, open_sealed, seal
from reef.crypto.bodies import (
    open_exchange,
    open_trajectory,
    seal_exchange,
    strip_exchange,
    trajectory_receipts,
)

MARKER = "marker-6f1d2c-unique"


def exchange(record_id: str = "rec-1", scenario: str = "s") -> InferenceRecorded:
    return InferenceRecorded(
        event_id=record_id,
        scenario=scenario,
        occurred_at=utc_now(),
        producer="test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="r0",
        stream=False,
        status=200,
        complete=True,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        request_json=json.dumps({"messages": [{"role": "user", "content": f"ask {MARKER}"}]}),
        response_json=json.dumps({"choices": [{"message": {"content": f"say {MARKER}"}}]}),
    )


def test_seal_round_trips_and_hides_the_plaintext() -> None:
    key = new_data_key()
    aad = body_aad("s", "rec-1", "request")
    blob = seal(key, MARKER.encode(), aad)
    assert MARKER.encode() not in blob
    assert len(blob) == 12 + len(MARKER) + 16
    assert open_sealed(key, blob, aad) == MARKER.encode()
    assert seal(key, MARKER.encode(), aad) != blob  # a fresh nonce every time


@pytest.mark.parametrize(
    "aad",
    [
        body_aad("other", "rec-1", "request"),
        body_aad("s", "rec-2", "request"),
        body_aad("s", "rec-1", "response"),
    ],
)
def test_a_blob_does_not_open_in_another_place(aad: bytes) -> None:
    key = new_data_key()
    blob = seal(key, b"body", body_aad("s", "rec-1", "request"))
    with pytest.raises(SealError):
        open_sealed(key, blob, aad)


def test_wrong_key_tampering_and_truncation_are_refused() -> None:
    key = new_data_key()
    aad = body_aad("s", "rec-1", "request")
    blob = seal(key, b"body", aad)
    with pytest.raises(SealError):
        open_sealed(new_data_key(), blob, aad)
    flipped = bytearray(blob)
    flipped[14] ^= 1
    with pytest.raises(SealError):
        open_sealed(key, bytes(flipped), aad)
    with pytest.raises(SealError):
        open_sealed(key, blob[:20], aad)
    with pytest.raises(SealError):
        seal(b"short", b"body", aad)


def test_sealed_exchange_carries_no_plaintext_and_opens_back() -> None:
    key = new_data_key()
    plain = exchange()
    sealed = seal_exchange(plain, key)
    assert sealed.sealed and sealed.request_json is None and sealed.response_json is None
    assert sealed.request_sealed is not None and sealed.response_sealed is not None
    assert MARKER.encode() not in sealed.request_sealed + sealed.response_sealed
    assert seal_exchange(sealed, key) is sealed  # sealing twice is a no-op
    opened = open_exchange(sealed, key)
    assert opened.request_json == plain.request_json
    assert opened.response_json == plain.response_json
    assert opened.request_sealed is None and opened.response_sealed is None
    with pytest.raises(SealError):
        open_exchange(sealed, new_data_key())
    # a blob moved to another record does not open there
    moved = replace(sealed, event_id="rec-2")
    with pytest.raises(SealError):
        open_exchange(moved, key)
    stripped = strip_exchange(sealed)
    assert stripped.request_sealed is None and stripped.request_json is None


def test_claim_checked_sealed_bodies_open_through_the_fetcher() -> None:
    key = new_data_key()
    sealed = seal_exchange(exchange(), key)
    objects = {"sha256:req": sealed.request_sealed, "sha256:resp": sealed.response_sealed}
    offloaded = replace(
        sealed,
        request_sealed=None,
        response_sealed=None,
        request_ref="sha256:req",
        response_ref="sha256:resp",
    )
    opened = open_exchange(offloaded, key, lambda ref: objects[ref] or b"")
    assert MARKER in (opened.request_json or "") and opened.request_ref is None


def test_trajectory_opens_per_record_and_marks_erased_turns() -> None:
    keys = {"rec-1": new_data_key(), "rec-2": new_data_key()}
    turns = []
    for record_id, key in keys.items():
        sealed = seal_exchange(exchange(record_id), key)
        turns.append(
            {
                "receipt": record_id,
                "request": sealed_copy(sealed.request_sealed, None),
                "response": sealed_copy(sealed.response_sealed, None),
            }
        )
    text = json.dumps(turns)
    assert MARKER not in text
    assert trajectory_receipts(turns) == ["rec-1", "rec-2"]
    opened, complete = open_trajectory(turns, "s", keys)
    assert complete
    assert opened[0]["request"]["messages"][0]["content"] == f"ask {MARKER}"
    assert opened[1]["response"]["choices"][0]["message"]["content"] == f"say {MARKER}"
    # erase rec-2: the sample is incomplete and keeps no body of it
    partial, complete = open_trajectory(turns, "s", {"rec-1": keys["rec-1"]})
    assert not complete
    assert partial[1] == {"receipt": "rec-2", "request": None, "response": None, "erased": True}
    assert MARKER in json.dumps(partial[0])
    # plaintext (legacy) turns pass through untouched
    legacy: list[dict[str, Any]] = [
        {"receipt": "old", "request": {"messages": []}, "response": None}
    ]
    assert open_trajectory(legacy, "s", {}) == (legacy, True)


def test_sealed_copy_shapes() -> None:
    assert sealed_copy(None, None) is None
    assert sealed_copy(b"\x01\x02", None) == {"sealed": base64.b64encode(b"\x01\x02").decode()}
    assert sealed_copy(None, "sha256:x") == {"sealed_claim": "sha256:x"}
