"""Sealing and opening the bodies of exchanges and of the samples that copy them (pure).

An exchange (:class:`~reef.core.events.InferenceRecorded`) is sealed once, by the writer, under
a fresh data key: ``request_json``/``response_json`` become ``request_sealed``/
``response_sealed`` (bytes; the claim check may move them to the artifact store, where
the object is then the sealed blob). The join copies the sealed blobs verbatim into the
samples' trajectories as ``{"sealed": "<base64>"}`` or ``{"sealed_claim": "sha256:<oid>"}``
(it never holds a key), so one record's key opens its bodies wherever they were copied,
and a sample is readable only while every record it contains still has its key.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from reef.core.events import InferenceRecorded
from reef.core.sealed import is_sealed_copy
from reef.crypto.seal import body_aad, open_sealed, seal

REQUEST = "request"
RESPONSE = "response"

#: fetches a claim-checked object's bytes by its ``sha256:<oid>`` reference
FetchBytes = Callable[[str], bytes]


def seal_exchange(event: InferenceRecorded, key: bytes) -> InferenceRecorded:
    """The event with its bodies sealed under ``key`` (no-op when already sealed)."""
    if event.sealed:
        return event

    def sealed(text: str | None, part: str) -> bytes | None:
        if text is None:
            return None
        return seal(key, text.encode("utf-8"), body_aad(event.scenario, event.event_id, part))

    return replace(
        event,
        sealed=True,
        request_json=None,
        response_json=None,
        request_sealed=sealed(event.request_json, REQUEST),
        response_sealed=sealed(event.response_json, RESPONSE),
    )


def open_exchange(
    event: InferenceRecorded, key: bytes, fetch: FetchBytes | None = None
) -> InferenceRecorded:
    """The readable view of a sealed event: plaintext ``request_json``/``response_json``.

    A claim-checked body is fetched and opened; without a fetcher it stays a reference
    (``request_ref``), as claim-checked bodies do for readers without an artifact store.
    Raises SealError (a wrong key or a tampered blob) or the fetcher's error.
    """
    if not event.sealed:
        return event

    def opened(blob: bytes | None, ref: str | None, part: str) -> str | None:
        if ref is not None:
            if fetch is None:
                return None
            blob = fetch(ref)
        if blob is None:
            return None
        aad = body_aad(event.scenario, event.event_id, part)
        return open_sealed(key, blob, aad).decode("utf-8")

    def kept(ref: str | None) -> str | None:
        return ref if fetch is None else None

    return replace(
        event,
        request_json=opened(event.request_sealed, event.request_ref, REQUEST),
        response_json=opened(event.response_sealed, event.response_ref, RESPONSE),
        request_sealed=None,
        response_sealed=None,
        request_ref=kept(event.request_ref),
        response_ref=kept(event.response_ref),
    )


def strip_exchange(event: InferenceRecorded) -> InferenceRecorded:
    """An erased event's view: no body, no sealed blob, no reference."""
    return replace(
        event,
        request_json=None,
        response_json=None,
        request_sealed=None,
        response_sealed=None,
        request_ref=None,
        response_ref=None,
    )


# -- copies inside trajectories (their pure form: reef.core.sealed) -------------------------


def trajectory_receipts(trajectory: list[Any]) -> list[str]:
    """Receipts of the turns that carry sealed bodies (their keys open the trajectory)."""
    return [
        str(turn.get("receipt"))
        for turn in trajectory
        if isinstance(turn, dict)
        and (is_sealed_copy(turn.get(REQUEST)) or is_sealed_copy(turn.get(RESPONSE)))
    ]


def open_trajectory(
    trajectory: list[Any],
    scenario: str,
    keys: Mapping[str, bytes],
    fetch: FetchBytes | None = None,
) -> tuple[list[Any], bool]:
    """(trajectory with sealed copies opened, complete?).

    A turn whose record has no key any more (erased) keeps no body: its request and
    response become None and it is marked ``"erased": true``; ``complete`` is then False
    and the sample must not be used for training.
    """
    out: list[Any] = []
    complete = True
    for turn in trajectory:
        if not isinstance(turn, dict) or turn.get("receipt") not in trajectory_receipts([turn]):
            out.append(turn)
            continue
        receipt = str(turn["receipt"])
        key = keys.get(receipt)
        if key is None:
            complete = False
            out.append({**turn, REQUEST: None, RESPONSE: None, "erased": True})
            continue
        opened = dict(turn)
        for part in (REQUEST, RESPONSE):
            value = turn.get(part)
            if isinstance(value, dict) and is_sealed_copy(value):
                if "sealed_claim" in value and fetch is None:
                    continue  # stays a reference, like a plain claim-checked body
                opened[part] = _loads(_open_copy(value, key, scenario, receipt, part, fetch))
        out.append(opened)
    return out, complete


def _open_copy(
    copy: dict[str, str],
    key: bytes,
    scenario: str,
    receipt: str,
    part: str,
    fetch: FetchBytes | None,
) -> str:
    if "sealed_claim" in copy:
        if fetch is None:
            raise LookupError(f"{receipt}: claim-checked {part} and no fetcher")
        blob = fetch(copy["sealed_claim"])
    else:
        blob = base64.b64decode(copy["sealed"])
    return open_sealed(key, blob, body_aad(scenario, receipt, part)).decode("utf-8")


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
