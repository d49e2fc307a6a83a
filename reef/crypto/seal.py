"""AES-256-GCM sealing of one record's bodies under that record's data key (pure).

A sealed blob is ``nonce (12 bytes) || ciphertext || tag (16 bytes)``. The associated
data binds a blob to its place: ``reef-body-v1 NUL scenario NUL record id NUL part``, so
a blob copied to another record, scenario or field (request ↔ response) does not open.
"""

from __future__ import annotations

import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from reef.core.errors import ReefError

DATA_KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
_AAD_VERSION: Final = b"reef-body-v1"


class SealError(ReefError):
    """A sealed blob does not open with the key it names (wrong key, tampered, truncated)."""


def new_data_key() -> bytes:
    """A fresh random AES-256 key."""
    return os.urandom(DATA_KEY_BYTES)


def body_aad(scenario: str, record_id: str, part: str) -> bytes:
    """Associated data of one body of one record (``part``: request or response)."""
    return b"\x00".join((_AAD_VERSION, scenario.encode(), record_id.encode(), part.encode()))


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext`` (a random 96-bit nonce per call)."""
    if len(key) != DATA_KEY_BYTES:
        raise SealError(f"a data key has {DATA_KEY_BYTES} bytes, not {len(key)}")
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, blob: bytes, aad: bytes) -> bytes:
    """The plaintext of a blob made by :func:`seal` with the same key and ``aad``."""
    if len(key) != DATA_KEY_BYTES:
        raise SealError(f"a data key has {DATA_KEY_BYTES} bytes, not {len(key)}")
    if len(blob) < NONCE_BYTES + TAG_BYTES:
        raise SealError("sealed blob is truncated")
    try:
        return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag:
        raise SealError("sealed blob does not open with this key and context") from None
