"""Sealing and opening the bodies of exchanges and of the samples that copy them (pure).

An exchange (:class:`~reef.core.events.InferenceRecorded`) is sealed once, by the writer, under
a fresh data key: ``request_json``/``response_json`` become ``request_sealed``/
``response_sealed`` (bytes; the claim check may move them to the artifact store, where
the object is then the sealed blob). The join copies the sealed blobs verbatim into the
samples' trajectories as ``{"sealed": "<base64>"}`` or ``{"sealed_claim": "sha256:<oid>"}``
(it never holds a key), so one record's key opens its bodies wherever they were copied,
and a sample is readable only while every record it contains still has its key.

A sealed body opens to its envelope (:mod:`reef.crypto.envelope`): the text, compressed
or (records from before the envelope) bare, or a block manifest, which only the body
store (:mod:`reef.services.bodystore`) can assemble: its blocks live in packs sealed under
the keys of the records that introduced them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reef.core.events import InferenceRecorded
from reef.core.sealed import is_sealed_copy
from reef.crypto.envelope import Manifest, unwrap, wrap_text
from reef.crypto.seal import SealError, body_aad, open_sealed, seal

REQUEST = "request"
RESPONSE = "response"

#: fetches a claim-checked object's bytes by its ``sha256:<oid>`` reference
FetchBytes = Callable[[str], bytes]
#: what a sealed body opens to: its text, or the block manifest it is assembled from
Content = str | Manifest


@dataclass(frozen=True, slots=True)
class OpenedBody:
    """A sealed copy in a trajectory, opened (its JSON not loaded yet)."""

    content: Content


def seal_exchange(
    event: InferenceRecorded,
    key: bytes,
    *,
    compress: bool = True,
    request: bytes | None = None,
) -> InferenceRecorded:
    """The event with its bodies sealed under ``key`` (no-op when already sealed).

    Each body is sealed in its envelope (:mod:`reef.crypto.envelope`): compressed, or
    with ``compress=False`` as bare UTF-8 (the format records had before the envelope).
    ``request``: the request's plaintext already wrapped (a block manifest).
    """
    if event.sealed:
        return event

    def sealed(text: str | None, part: str, plain: bytes | None = None) -> bytes | None:
        if plain is None:
            if text is None:
                return None
            plain = wrap_text(text) if compress else text.encode("utf-8")
        return seal(key, plain, body_aad(event.scenario, event.event_id, part))

    return replace(
        event,
        sealed=True,
        request_json=None,
        response_json=None,
        request_sealed=sealed(event.request_json, REQUEST, request),
        response_sealed=sealed(event.response_json, RESPONSE),
    )


def open_parts(
    event: InferenceRecorded, key: bytes, fetch: FetchBytes | None = None
) -> dict[str, Content | None]:
    """What each sealed body of ``event`` opens to: its text, or the manifest it is
    assembled from; None when absent, or claim-checked and there is no fetcher.

    Raises SealError (a wrong key or a tampered blob) or the fetcher's error.
    """

    def opened(blob: bytes | None, ref: str | None, part: str) -> Content | None:
        if ref is not None:
            if fetch is None:
                return None
            blob = fetch(ref)
        if blob is None:
            return None
        aad = body_aad(event.scenario, event.event_id, part)
        return unwrap(open_sealed(key, blob, aad))

    return {
        REQUEST: opened(event.request_sealed, event.request_ref, REQUEST),
        RESPONSE: opened(event.response_sealed, event.response_ref, RESPONSE),
    }


def with_bodies(
    event: InferenceRecorded, texts: Mapping[str, str | None], *, fetched: bool
) -> InferenceRecorded:
    """The readable view of a sealed event given its opened bodies' texts: a body that
    was not fetched (``fetched`` False) stays a reference (``request_ref``), as
    claim-checked bodies do for readers without an artifact store."""

    def kept(ref: str | None) -> str | None:
        return None if fetched else ref

    return replace(
        event,
        request_json=texts.get(REQUEST),
        response_json=texts.get(RESPONSE),
        request_sealed=None,
        response_sealed=None,
        request_ref=kept(event.request_ref),
        response_ref=kept(event.response_ref),
    )


def open_exchange(
    event: InferenceRecorded, key: bytes, fetch: FetchBytes | None = None
) -> InferenceRecorded:
    """The readable view of a sealed event: plaintext ``request_json``/``response_json``.

    A claim-checked body is fetched and opened; without a fetcher it stays a reference.
    A body stored as blocks needs the body store (:mod:`reef.services.bodystore`):
    here it raises SealError, as does a wrong key or a tampered blob.
    """
    if not event.sealed:
        return event
    parts = open_parts(event, key, fetch)
    texts = {part: None if c is None else text_of(c) for part, c in parts.items()}
    return with_bodies(event, texts, fetched=fetch is not None)


def text_of(content: Content) -> str:
    """An opened body's text (SealError when it must be assembled from blocks)."""
    if isinstance(content, Manifest):
        raise SealError("this body is stored as blocks: open it through the body store")
    return content


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
    and the sample must not be used for training. A body stored as blocks needs the body
    store (:func:`open_trajectory_contents` is the first half of what it does).
    """
    turns, complete = open_trajectory_contents(trajectory, scenario, keys, fetch)
    return loaded_trajectory(turns, text_of), complete


def open_trajectory_contents(
    trajectory: list[Any],
    scenario: str,
    keys: Mapping[str, bytes],
    fetch: FetchBytes | None = None,
) -> tuple[list[Any], bool]:
    """:func:`open_trajectory` with each opened body left as it opened (an
    :class:`OpenedBody`: its text or its manifest), for :func:`loaded_trajectory`."""
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
                opened[part] = OpenedBody(_open_copy(value, key, scenario, receipt, part, fetch))
        out.append(opened)
    return out, complete


def loaded_trajectory(turns: list[Any], text: Callable[[Content], str]) -> list[Any]:
    """The turns of :func:`open_trajectory_contents` with each opened body's JSON loaded
    (``text`` turns a manifest into its assembled text)."""
    out: list[Any] = []
    for turn in turns:
        if isinstance(turn, dict):
            turn = {
                k: _loads(text(v.content)) if isinstance(v, OpenedBody) else v
                for k, v in turn.items()
            }
        out.append(turn)
    return out


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _open_copy(
    copy: dict[str, str],
    key: bytes,
    scenario: str,
    receipt: str,
    part: str,
    fetch: FetchBytes | None,
) -> Content:
    if "sealed_claim" in copy:
        if fetch is None:
            raise LookupError(f"{receipt}: claim-checked {part} and no fetcher")
        blob = fetch(copy["sealed_claim"])
    else:
        blob = base64.b64decode(copy["sealed"])
    return unwrap(open_sealed(key, blob, body_aad(scenario, receipt, part)))
