"""Crypto-shredding: bodies sealed under per-record data keys that erasure destroys."""

from reef.crypto.keyring import KeyRing, key_record, tombstone_record
from reef.crypto.seal import (
    DATA_KEY_BYTES,
    SealError,
    body_aad,
    new_data_key,
    open_sealed,
    seal,
)

__all__ = [
    "DATA_KEY_BYTES",
    "KeyRing",
    "SealError",
    "body_aad",
    "key_record",
    "new_data_key",
    "open_sealed",
    "seal",
    "tombstone_record",
]
