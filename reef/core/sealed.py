"""How a sealed body travels inside trajectories (pure: no key, no cryptography).

The join carries a sealed request/response body as the sealed blob itself (base64) or as
the claim-check reference of a sealed blob in the artifact store; opening it takes the
record's data key (:mod:`reef.crypto.bodies`), which erasure destroys.
"""

from __future__ import annotations

import base64
from typing import Any


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
