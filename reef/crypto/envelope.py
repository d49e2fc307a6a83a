"""What a sealed body's plaintext holds: the versioned envelope (pure).

A sealed body opens to one of:

- **the body's UTF-8 text** (records sealed before the envelope existed; a JSON text
  never begins with a NUL byte, which is how the two are told apart);
- ``NUL 'z'`` + the text compressed with zstd (level 3), the default since; or
- ``NUL 'm'`` + a zstd-compressed block manifest (:mod:`reef.crypto.blocks`): the body
  is assembled from content-addressed blocks, some introduced by earlier records.

zstd over zlib: at level 3 it compresses an agent's request about as well as zlib's
default level for far less CPU time (``docs/storage.md`` gives the figures). Its
implementation is cramjam's, already a dependency (the Kafka codecs).

The envelope is inside the seal: compression happens before encryption, so the log and
the artifact store only ever hold ciphertext.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import cramjam

from reef.crypto.seal import SealError

TEXT: Final = b"\x00z"
MANIFEST: Final = b"\x00m"
LEVEL: Final = 3


@dataclass(frozen=True, slots=True)
class Manifest:
    """An opened block manifest's JSON bytes (:mod:`reef.crypto.blocks` reads them)."""

    data: bytes


def compress(data: bytes) -> bytes:
    return bytes(cramjam.zstd.compress(data, LEVEL))


def decompress(data: bytes) -> bytes:
    try:
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise SealError(f"sealed body does not decompress: {exc}") from None


def wrap_text(text: str) -> bytes:
    """The plaintext to seal for a whole body (compressed)."""
    return TEXT + compress(text.encode("utf-8"))


def wrap_manifest(manifest: bytes) -> bytes:
    """The plaintext to seal for a body stored as blocks."""
    return MANIFEST + compress(manifest)


def unwrap(plaintext: bytes) -> str | Manifest:
    """The body's text, or the manifest it must be assembled from."""
    if plaintext[:1] != b"\x00":
        return _utf8(plaintext)  # sealed before the envelope existed
    head, rest = plaintext[:2], plaintext[2:]
    if head == TEXT:
        return _utf8(decompress(rest))
    if head == MANIFEST:
        return Manifest(decompress(rest))
    raise SealError(f"unknown sealed body format {head!r}")


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SealError(f"sealed body is not UTF-8: {exc}") from None
