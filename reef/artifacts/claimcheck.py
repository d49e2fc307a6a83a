"""Claim check: keep big bodies out of events; the event carries ``sha256:<oid>`` instead.

An event field pair ``(inline, ref)`` holds exactly one of them: small text inline,
large text as a reference to an object in the artifact store. The object is stored
before the event is written, so a reader never finds a reference without its bytes.
"""

from __future__ import annotations

from typing import Final

from reef.artifacts.errors import ArtifactCorruptError, ArtifactError
from reef.artifacts.store import ArtifactStore, is_valid_oid

REF_PREFIX: Final = "sha256:"


def ref_for(oid: str) -> str:
    return REF_PREFIX + oid


def parse_ref(ref: str) -> str:
    """The oid of a ``sha256:<oid>`` reference; ArtifactError if it is not one."""
    oid = ref.removeprefix(REF_PREFIX)
    if not ref.startswith(REF_PREFIX) or not is_valid_oid(oid):
        raise ArtifactError(f"not a claim-check reference: {ref!r}")
    return oid


class ClaimCheck:
    """Offloads UTF-8 bodies larger than ``threshold_bytes`` to the store."""

    def __init__(self, store: ArtifactStore, threshold_bytes: int) -> None:
        if threshold_bytes < 0:
            raise ValueError("threshold_bytes must be >= 0")
        self._store = store
        self.threshold_bytes = threshold_bytes

    def offload(self, text: str) -> tuple[str | None, str | None]:
        """``(text, None)`` when it fits, else ``(None, "sha256:<oid>")`` once stored."""
        data = text.encode("utf-8")
        if len(data) <= self.threshold_bytes:
            return text, None
        return None, ref_for(self._store.put_bytes(data).oid)

    def offload_bytes(self, data: bytes) -> str | None:
        """None when ``data`` fits inline, else its ``sha256:<oid>`` once stored."""
        if len(data) <= self.threshold_bytes:
            return None
        return ref_for(self._store.put_bytes(data).oid)

    def store_bytes(self, data: bytes) -> str:
        """``data``'s ``sha256:<oid>`` once stored, whatever its size (a block pack)."""
        return ref_for(self._store.put_bytes(data).oid)

    def fetch_bytes(self, ref: str) -> bytes:
        """An offloaded object's bytes (sha256-verified by the store)."""
        return self._store.get_bytes(parse_ref(ref))

    def resolve(self, inline: str | None, ref: str | None) -> str:
        """The body, fetched and sha256-verified when it was offloaded."""
        if inline is not None and ref is None:
            return inline
        if inline is not None or ref is None:
            raise ArtifactError("exactly one of inline text and reference must be set")
        oid = parse_ref(ref)
        try:
            return self._store.get_bytes(oid).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ArtifactCorruptError(oid, "claim-checked body is not UTF-8") from exc
