"""The S3 artifact store: objects at ``<prefix>lfs/objects/aa/bb/<oid>`` in one bucket.

Speaks S3 through the ``minio`` client, so it works with SeaweedFS, MinIO, AIStor
or AWS. Commit order of a put, written once:

1. hash the source (read only); HEAD the key: present with that size → done, so a
   re-put costs one local read and one request;
2. stream the source with ``put_object`` (one PUT below the part size, multipart
   above it, one part in memory and in flight at a time); the stream re-hashes the
   bytes and raises on the read that completes them if the file changed since step
   1, which is *before* the last part is sent, so the upload is abandoned;
3. S3 makes an object visible only when its PUT or CompleteMultipartUpload
   succeeds, so a failure anywhere before leaves no object under the key, at most
   an incomplete multipart upload (minio aborts it when the server is reachable; a
   bucket lifecycle rule ``AbortIncompleteMultipartUpload`` collects the rest).

Concurrent puts of one oid write identical bytes to one key; the last complete
write wins and every reader sees a complete object.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO, Final

import urllib3
from minio import Minio
from minio.error import MinioException, S3Error

from reef.artifacts.errors import ArtifactError, ArtifactNotFoundError
from reef.artifacts.store import (
    ObjectRef,
    Progress,
    VerifiedReader,
    copy_to_file,
    hash_file,
    object_key,
    read_all,
    ref_for_bytes,
)

MIB: Final = 1024 * 1024
DEFAULT_PART_SIZE: Final = 8 * MIB
_MAX_PARTS: Final = 10_000
_NOT_FOUND: Final = frozenset({"NoSuchKey", "NoSuchObject", "ResourceNotFound"})
_LIBRARY_ERRORS: Final = (MinioException, urllib3.exceptions.HTTPError, OSError)


@contextlib.contextmanager
def _translated(what: str, oid: str | None = None) -> Iterator[None]:
    """minio / urllib3 / OSError → the artifact error tree (once, here)."""
    try:
        yield
    except S3Error as exc:
        if oid is not None and exc.code in _NOT_FOUND:
            raise ArtifactNotFoundError(oid) from exc
        raise ArtifactError(f"{what}: S3 error {exc.code}: {exc.message}") from exc
    except _LIBRARY_ERRORS as exc:
        raise ArtifactError(f"{what}: {exc}") from exc


def _part_size(length: int, minimum: int) -> int:
    """The configured part size, raised (in whole MiB) when S3's 10 000-part cap needs it."""
    needed = -(-length // _MAX_PARTS)
    return max(minimum, -(-needed // MIB) * MIB)


class _HashingUpload:
    """The source file as minio reads it: re-hashed, reporting progress.

    minio reads exactly ``expected.size`` bytes; the read that reaches that count
    checks the digest, so a changed file fails before the last part is uploaded.
    """

    def __init__(self, file: BinaryIO, expected: ObjectRef, progress: Progress | None) -> None:
        self._file = file
        self._expected = expected
        self._progress = progress
        self._digest = hashlib.sha256()
        self._seen = 0

    def read(self, n: int = -1, /) -> bytes:
        chunk = self._file.read(n)
        self._digest.update(chunk)
        self._seen += len(chunk)
        if self._progress is not None and chunk:
            self._progress(self._seen)
        if self._seen == self._expected.size and self._digest.hexdigest() != self._expected.oid:
            raise ArtifactError("the file changed while it was being stored")
        return chunk


class _ResponseSource:
    """A GET response body as a :class:`RawSource`, with urllib3 errors translated."""

    def __init__(self, response: Any, oid: str) -> None:
        self._response = response
        self._oid = oid

    def read(self, n: int, /) -> bytes:
        with _translated(f"reading artifact {self._oid}"):
            data: bytes = self._response.read(n)
        return data

    def close(self) -> None:
        self._response.close()
        self._response.release_conn()


class S3ArtifactStore:
    """Content-addressed objects in an S3 bucket (path-style addressing)."""

    def __init__(
        self,
        endpoint: str,
        *,
        access_key: str,
        secret_key: str,
        bucket: str,
        secure: bool | None = None,
        region: str = "us-east-1",
        prefix: str = "",
        part_size: int = DEFAULT_PART_SIZE,
        timeout_s: float = 60.0,
        retries: int = 3,
    ) -> None:
        """``endpoint`` is ``host:port`` or a URL (whose scheme sets ``secure`` unless given)."""
        scheme, _, host = endpoint.rpartition("://")
        if secure is None:
            secure = scheme != "http"
        if part_size < 5 * MIB:
            raise ValueError("S3 parts are at least 5 MiB")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._part_size = part_size
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=min(timeout_s, 10.0), read=timeout_s),
            maxsize=10,
            retries=urllib3.Retry(
                total=retries, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]
            ),
        )
        self._client = Minio(
            host.rstrip("/"),
            access_key=access_key,
            secret_key=secret_key,
            secure=secure,
            region=region,
            http_client=http,
        )

    def put_file(self, path: Path, *, progress: Progress | None = None) -> ObjectRef:
        path = Path(path)
        with _translated(f"cannot store {path}"):
            expected = hash_file(path)
            if self._has(expected):
                return expected
            with path.open("rb") as file:
                self._client.put_object(
                    self.bucket,
                    self._key(expected.oid),
                    _HashingUpload(file, expected, progress),  # type: ignore[arg-type]
                    expected.size,
                    part_size=_part_size(expected.size, self._part_size),
                    num_parallel_uploads=1,
                )
        return expected

    def put_bytes(self, data: bytes) -> ObjectRef:
        ref = ref_for_bytes(data)
        with _translated("cannot store bytes"):
            if not self._has(ref):
                self._client.put_object(
                    self.bucket,
                    self._key(ref.oid),
                    io.BytesIO(data),
                    ref.size,
                    part_size=_part_size(ref.size, self._part_size),
                    num_parallel_uploads=1,
                )
        return ref

    def open(self, oid: str) -> VerifiedReader:
        key = self._key(oid)
        with _translated(f"cannot read artifact {oid}", oid):
            response = self._client.get_object(self.bucket, key)
        length = response.headers.get("Content-Length")
        source = _ResponseSource(response, oid)
        try:
            size = int(length) if length is not None else self.size(oid)
        except BaseException:
            source.close()
            raise
        return VerifiedReader(source, oid, size)

    def get_to_file(self, oid: str, dest: Path) -> ObjectRef:
        reader = self.open(oid)
        with _translated(f"cannot write artifact {oid} to {dest}"):
            return copy_to_file(reader, Path(dest))

    def get_bytes(self, oid: str) -> bytes:
        return read_all(self.open(oid))

    def exists(self, oid: str) -> bool:
        try:
            self.size(oid)
        except ArtifactNotFoundError:
            return False
        return True

    def size(self, oid: str) -> int:
        key = self._key(oid)
        with _translated(f"cannot stat artifact {oid}", oid):
            stat = self._client.stat_object(self.bucket, key)
        return int(stat.size or 0)

    def download_url(self, oid: str, expires: timedelta) -> str | None:
        """A presigned GET URL (1 s ≤ ``expires`` ≤ 7 days), signed for this endpoint's host."""
        key = self._key(oid)
        with _translated(f"cannot presign artifact {oid}"):
            url: str = self._client.presigned_get_object(self.bucket, key, expires=expires)
        return url

    def object_key(self, oid: str) -> str:
        """The object's key in the bucket (for tests and tools)."""
        return self._key(oid)

    def _key(self, oid: str) -> str:
        return self.prefix + object_key(oid)

    def _has(self, ref: ObjectRef) -> bool:
        try:
            return self.size(ref.oid) == ref.size
        except ArtifactNotFoundError:
            return False
