"""The local-directory artifact store (embedded mode): ``<root>/lfs/objects/aa/bb/<oid>``.

Commit order of a put, written once:

1. hash the source (read only); if an object with that oid and size is already
   stored, stop: re-puts cost one read and no write;
2. copy the source into a fresh temp file under ``<root>/tmp`` (same filesystem),
   hashing again; a source that changed since step 1 aborts the put;
3. fsync the temp file, make it read-only;
4. ``os.replace`` it onto the object path: atomic, so readers see nothing or all
   of it, and concurrent writers of the same oid just replace equal bytes;
5. fsync the object's directory so the rename survives a crash.

A crash before step 4 leaves at most an orphan temp file under ``<root>/tmp``,
never a partial object. An object whose stored size is wrong is rewritten by the
next put of the same content.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import BinaryIO

from reef.artifacts.errors import ArtifactError, ArtifactNotFoundError
from reef.artifacts.store import (
    CHUNK_SIZE,
    ObjectRef,
    Progress,
    VerifiedReader,
    copy_to_file,
    fsync_dir,
    hash_file,
    object_key,
    read_all,
    ref_for_bytes,
)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise ArtifactError(f"{what}: {exc}") from exc


class _FileSource:
    """A stored file as a :class:`RawSource`, with OSError translated."""

    def __init__(self, file: BinaryIO, oid: str) -> None:
        self._file = file
        self._oid = oid

    def read(self, n: int, /) -> bytes:
        with _translated(f"reading artifact {self._oid}"):
            return self._file.read(n)

    def close(self) -> None:
        self._file.close()


class LocalArtifactStore:
    """Objects as read-only files under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> LocalArtifactStore:
        """The default location: ``<state_dir>/artifacts``."""
        return cls(Path(state_dir) / "artifacts")

    def put_file(self, path: Path, *, progress: Progress | None = None) -> ObjectRef:
        with _translated(f"cannot store {path}"):
            expected = hash_file(Path(path))
            if not self._has(expected):
                self._copy_in(Path(path), expected, progress)
            return expected

    def put_bytes(self, data: bytes) -> ObjectRef:
        ref = ref_for_bytes(data)
        with _translated("cannot store bytes"):
            if not self._has(ref):
                tmp = self._write_temp(lambda out: out.write(data))
                self._commit(tmp, ref.oid)
        return ref

    def open(self, oid: str) -> VerifiedReader:
        path = self._path(oid)
        try:
            file = path.open("rb", buffering=0)
        except FileNotFoundError as exc:
            raise ArtifactNotFoundError(oid) from exc
        except OSError as exc:
            raise ArtifactError(f"cannot open artifact {oid}: {exc}") from exc
        try:
            size = os.fstat(file.fileno()).st_size
        except OSError as exc:
            file.close()
            raise ArtifactError(f"cannot stat artifact {oid}: {exc}") from exc
        return VerifiedReader(_FileSource(file, oid), oid, size)

    def get_to_file(self, oid: str, dest: Path) -> ObjectRef:
        reader = self.open(oid)
        with _translated(f"cannot write artifact {oid} to {dest}"):
            return copy_to_file(reader, Path(dest))

    def get_bytes(self, oid: str) -> bytes:
        return read_all(self.open(oid))

    def exists(self, oid: str) -> bool:
        return self._path(oid).is_file()

    def size(self, oid: str) -> int:
        try:
            return self._path(oid).stat().st_size
        except FileNotFoundError as exc:
            raise ArtifactNotFoundError(oid) from exc
        except OSError as exc:
            raise ArtifactError(f"cannot stat artifact {oid}: {exc}") from exc

    def download_url(self, oid: str, expires: timedelta) -> str | None:
        """None: a local store has no URL of its own; the API streams the object."""
        self._path(oid)
        return None

    def object_path(self, oid: str) -> Path:
        """The stored file (for tests and tools; never write to it)."""
        return self._path(oid)

    # -- internals -------------------------------------------------------------

    def _path(self, oid: str) -> Path:
        return self.root / object_key(oid)

    def _has(self, ref: ObjectRef) -> bool:
        try:
            return self._path(ref.oid).stat().st_size == ref.size
        except FileNotFoundError:
            return False

    def _copy_in(self, source: Path, expected: ObjectRef, progress: Progress | None) -> None:
        def copy(out: BinaryIO) -> None:
            copied = _hash_copy(source, out, progress)
            if copied != expected:
                raise ArtifactError(f"{source} changed while it was being stored")

        tmp = self._write_temp(copy)
        self._commit(tmp, expected.oid)

    def _write_temp(self, fill: Callable[[BinaryIO], object]) -> Path:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="put-", dir=tmp_dir)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def _commit(self, tmp: Path, oid: str) -> None:
        target = self._path(oid)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(target.parent)


def _hash_copy(source: Path, out: BinaryIO, progress: Progress | None) -> ObjectRef:
    """Copy ``source`` into ``out`` in chunks; the copied bytes' sha256 and size."""
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as src:
        while chunk := src.read(CHUNK_SIZE):
            out.write(chunk)
            digest.update(chunk)
            size += len(chunk)
            if progress is not None:
                progress(size)
    return ObjectRef(digest.hexdigest(), size)
