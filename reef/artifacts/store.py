"""The artifact-store port: immutable objects addressed by their sha256 (the Git LFS oid).

Every backend keeps an object at ``lfs/objects/<oid[0:2]>/<oid[2:4]>/<oid>`` and
promises the same things:

* **Streaming.** Files are hashed and copied in :data:`CHUNK_SIZE` pieces; no call
  holds a whole object in memory except ``put_bytes``/``get_bytes``.
* **Verified reads.** :class:`VerifiedReader` hashes what it hands out and raises
  :class:`ArtifactCorruptError` as soon as the bytes read reach the object's size and
  their sha256 differs (or the stream ends short), so a reader never accepts bad bytes.
* **Atomic, idempotent writes.** An object is either absent or complete. Putting an
  object that is already present with the right size is a no-op; concurrent puts of
  the same object are safe because every writer stores the same bytes under one key.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeGuard

from reef.artifacts.errors import ArtifactCorruptError, ArtifactError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

CHUNK_SIZE: Final = 1024 * 1024
OID_PATTERN: Final = re.compile(r"[0-9a-f]{64}")

#: called with the number of bytes of the source consumed so far
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A stored object: its sha256 hex digest and its length in bytes."""

    oid: str
    size: int


class RawSource(Protocol):
    """What a backend hands :class:`VerifiedReader`: ``read(n)`` returns b"" at the end."""

    def read(self, n: int, /) -> bytes: ...

    def close(self) -> None: ...


class ArtifactStore(Protocol):
    """Content-addressed object storage (local directory or S3 bucket)."""

    def put_file(self, path: Path, *, progress: Progress | None = None) -> ObjectRef:
        """Store a file's bytes (streamed); a no-op when the object is already there."""
        ...

    def put_bytes(self, data: bytes) -> ObjectRef:
        """Store a small in-memory body."""
        ...

    def open(self, oid: str) -> VerifiedReader:
        """A stream of the object's bytes that fails on a sha256 or size mismatch."""
        ...

    def get_to_file(self, oid: str, dest: Path) -> ObjectRef:
        """Write the verified object to ``dest`` atomically (temp file, then rename)."""
        ...

    def get_bytes(self, oid: str) -> bytes:
        """The whole verified object, in memory (small objects only)."""
        ...

    def exists(self, oid: str) -> bool: ...

    def size(self, oid: str) -> int:
        """The stored object's length; ArtifactNotFoundError if it is absent."""
        ...

    def download_url(self, oid: str, expires: timedelta) -> str | None:
        """A URL a client may GET the object from directly, or None if there is none."""
        ...


def is_valid_oid(oid: object) -> TypeGuard[str]:
    return isinstance(oid, str) and OID_PATTERN.fullmatch(oid) is not None


def require_oid(oid: str) -> str:
    """Reject anything but 64 lowercase hex digits (an oid also becomes a path / key)."""
    if not is_valid_oid(oid):
        raise ArtifactError(f"not a sha256 oid: {oid!r}")
    return oid


def object_key(oid: str) -> str:
    """Where the object lives, relative to the store's root / key prefix."""
    require_oid(oid)
    return f"lfs/objects/{oid[0:2]}/{oid[2:4]}/{oid}"


def ref_for_bytes(data: bytes) -> ObjectRef:
    return ObjectRef(hashlib.sha256(data).hexdigest(), len(data))


def hash_file(path: Path) -> ObjectRef:
    """sha256 and size of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as src:
        while chunk := src.read(CHUNK_SIZE):
            digest.update(chunk)
            size += len(chunk)
    return ObjectRef(digest.hexdigest(), size)


class VerifiedReader(io.RawIOBase):
    """A read-only stream of one object that checks its sha256 and size as it goes.

    The check fires on the read that reaches ``size`` bytes (and again at the end of
    the stream), so callers that stop after exactly ``size`` bytes are covered too.
    """

    def __init__(self, source: RawSource, oid: str, size: int) -> None:
        super().__init__()
        self._source = source
        self.oid = oid
        self.size = size
        self._digest = hashlib.sha256()
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self._source.read(len(view))
        if not chunk:
            self._check_end()
            return 0
        view[: len(chunk)] = chunk
        self._digest.update(chunk)
        self._seen += len(chunk)
        if self._seen >= self.size:
            self._check_end()
        return len(chunk)

    def _check_end(self) -> None:
        if self._seen != self.size:
            raise ArtifactCorruptError(self.oid, f"{self._seen} bytes, expected {self.size}")
        if self._digest.hexdigest() != self.oid:
            raise ArtifactCorruptError(self.oid, f"sha256 is {self._digest.hexdigest()}")

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


def copy_to_file(reader: VerifiedReader, dest: Path) -> ObjectRef:
    """Stream a verified object into ``dest``: temp file beside it, fsync, rename.

    On any failure the temp file is removed and ``dest`` is left as it was.
    """
    with reader:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := reader.read(CHUNK_SIZE):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
    return ObjectRef(reader.oid, reader.size)


def read_all(reader: VerifiedReader) -> bytes:
    parts: list[bytes] = []
    with reader:
        while chunk := reader.read(CHUNK_SIZE):
            parts.append(chunk)
    return b"".join(parts)


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
