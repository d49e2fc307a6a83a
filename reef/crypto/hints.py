"""A judgement's hindsight hints, sealed under the records they quote (pure).

A hint quotes the conversation: the judged turn (``receipt_id``) and its next state (the
user's reply or the tool result, in the next record's request: ``next_receipt_id``). The
event store seals the hints of every judgement it appends (their JSON list, one blob) the
way bodies are sealed (:mod:`reef.crypto.seal`, part ``hints``), twice: under the next
record's data key, then under the judged record's. The blob opens only while both keys
exist, so erasing either record shreds the hints. ``TurnJudged.hints_sealed`` holds the
blob and ``hints`` stays empty; a judgement appended when one of its records has no key
any more (erased meanwhile) keeps no hint at all.

The feedback processor copies the blob verbatim into the feedback of the report it
computes (:func:`~reef.core.sealed.sealed_hints_copy`, naming both records), and the join
copies that feedback into the sample: nothing on the way holds a key. Readers open the
hints with :func:`open_judgement` and :func:`open_feedback`; without a key they read as
absent and the event as erased (the trainer then skips the sample, as it skips one whose
body was erased).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reef.core.events import TurnJudged
from reef.core.sealed import hint_records, is_sealed_hints
from reef.crypto.seal import SealError, body_aad, open_sealed, seal

HINTS = "hints"


def seal_hints(hints: Sequence[str], scenario: str, keys: Sequence[tuple[str, bytes]]) -> bytes:
    """The hints' JSON sealed under each ``(record id, key)`` in turn, the first outermost."""
    blob = json.dumps(list(hints)).encode("utf-8")
    for record_id, key in reversed(keys):
        blob = seal(key, blob, body_aad(scenario, record_id, HINTS))
    return blob


def open_hints(blob: bytes, scenario: str, keys: Sequence[tuple[str, bytes]]) -> list[str]:
    """What :func:`seal_hints` sealed (raises SealError: a wrong key, a tampered blob)."""
    for record_id, key in keys:
        blob = open_sealed(key, blob, body_aad(scenario, record_id, HINTS))
    try:
        hints = json.loads(blob)
    except ValueError:  # opened fewer layers than were sealed
        raise SealError("sealed hints do not open to a JSON list") from None
    if not isinstance(hints, list) or not all(isinstance(h, str) for h in hints):
        raise SealError("sealed hints are not a list of strings")
    return hints


def seal_judgement(judged: TurnJudged, keys: Mapping[str, bytes]) -> TurnJudged:
    """The judgement with its hints sealed (no-op without hints, or sealed already);
    when a record it quotes has no key (erased), its hints are dropped."""
    if not judged.hints or judged.hints_sealed is not None:
        return judged
    records = hint_records(judged)
    if any(r not in keys for r in records):
        return replace(judged, hints=[])
    blob = seal_hints(judged.hints, judged.scenario, [(r, keys[r]) for r in records])
    return replace(judged, hints=[], hints_sealed=blob)


def open_judgement(judged: TurnJudged, keys: Mapping[str, bytes]) -> tuple[TurnJudged, bool]:
    """(the judgement with its hints in clear, opened?): without a key, no hint."""
    if judged.hints_sealed is None:
        return judged, True
    records = hint_records(judged)
    if any(r not in keys for r in records):
        return replace(judged, hints=[], hints_sealed=None), False
    hints = open_hints(judged.hints_sealed, judged.scenario, [(r, keys[r]) for r in records])
    return replace(judged, hints=hints, hints_sealed=None), True


def feedback_records(feedback_json: str) -> list[str]:
    """The records whose keys open a feedback's sealed hints ([]: nothing sealed)."""
    copy = _sealed_hints(feedback_json)
    return list(copy["receipts"]) if copy is not None else []


def open_feedback(feedback_json: str, scenario: str, keys: Mapping[str, bytes]) -> tuple[str, bool]:
    """(the feedback JSON with its sealed hints opened, opened?): ``null`` without a key."""
    copy = _sealed_hints(feedback_json)
    if copy is None:
        return feedback_json, True
    records: list[str] = copy["receipts"]
    if any(r not in keys for r in records):
        return "null", False
    blob = base64.b64decode(copy["sealed_hints"], validate=True)
    hints = open_hints(blob, scenario, [(r, keys[r]) for r in records])
    return json.dumps(hints or None), True


def _sealed_hints(feedback_json: str) -> dict[str, Any] | None:
    if '"sealed_hints"' not in feedback_json:
        return None  # most feedback: no parse
    try:
        value = json.loads(feedback_json)
    except ValueError:
        return None
    return value if is_sealed_hints(value) else None
