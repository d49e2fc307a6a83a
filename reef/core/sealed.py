"""How sealed content travels inside JSON payloads (pure: no key, no cryptography).

The join carries a sealed request/response body as the sealed blob itself (base64) or as
the claim-check reference of a sealed blob in the artifact store; opening it takes the
record's data key (:mod:`reef.crypto.bodies`), which erasure destroys.

A judgement's sealed hints travel in the feedback of the report computed from it (and
of that report's sample) as ``{"sealed_hints": "<base64>", "receipts": [...]}``: the
records whose keys open them, outermost first (:mod:`reef.crypto.hints`).
"""

from __future__ import annotations

import base64
from typing import Any

from reef.core.events import TurnJudged


def sealed_copy(blob: bytes | None, ref: str | None) -> dict[str, str] | None:
    """How the join carries a sealed body in state and samples (no key needed)."""
    if ref is not None:
        return {"sealed_claim": ref}
    if blob is not None:
        return {"sealed": base64.b64encode(blob).decode("ascii")}
    return None


def is_sealed_copy(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    return "sealed" in value or "sealed_claim" in value


def hint_records(judged: TurnJudged) -> list[str]:
    """The records whose keys seal a judgement's hints, outermost first."""
    return [judged.receipt_id, judged.next_receipt_id]


def sealed_hints_copy(blob: bytes, receipts: list[str]) -> dict[str, Any]:
    """How a report's feedback carries a judgement's sealed hints (no key needed)."""
    return {"sealed_hints": base64.b64encode(blob).decode("ascii"), "receipts": receipts}


def is_sealed_hints(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) != {"sealed_hints", "receipts"}:
        return False
    receipts = value["receipts"]
    return (
        isinstance(value["sealed_hints"], str)
        and isinstance(receipts, list)
        and bool(receipts)
        and all(isinstance(r, str) for r in receipts)
    )
