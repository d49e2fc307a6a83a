"""Git LFS on top of the artifact store: pointer files and the batch API (download only).

Pointer format (git-lfs ``docs/spec.md``): UTF-8 ``key value\\n`` lines, ``version``
first, the rest sorted: ``version https://git-lfs.github.com/spec/v1``,
``oid sha256:<64 hex>``, ``size <n>``.

Batch API (git-lfs ``docs/api/batch.md``): the client POSTs ``<lfs.url>/objects/batch``
(so the route is ``/reef/lfs/{scenario}/objects/batch`` when ``lfs.url`` is
``…/reef/lfs/{scenario}``) with media type :data:`LFS_MEDIA_TYPE`.
:func:`lfs_batch_response` builds the 200 body; refusals of the whole request are
raised as :class:`reef.core.errors.RequestError`, which the endpoint renders as
``{"message": ...}`` with that status and :data:`LFS_MEDIA_TYPE`:

* ``upload`` → 403 (``lfs_read_only``): the spec's "read, but not write access",
  which git-lfs reports as an authorization error and does not retry. Releases are
  published through Reef, never pushed with ``git lfs push``.
* malformed body, no ``basic`` transfer, too many objects → 422 / 413.
* a ``hash_algo`` other than sha256 → 409.

Per-object problems keep the 200: unknown oid → ``error {code: 404}``; invalid oid
or a size that differs from the stored object → ``error {code: 422}``. Store
failures (e.g. S3 unreachable) propagate as ArtifactError: answer 503, which
git-lfs retries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

from reef.artifacts.errors import ArtifactNotFoundError
from reef.artifacts.store import ArtifactStore, is_valid_oid
from reef.core.errors import RequestError

LFS_MEDIA_TYPE: Final = "application/vnd.git-lfs+json"
POINTER_VERSION: Final = "https://git-lfs.github.com/spec/v1"
MAX_BATCH_OBJECTS: Final = 1000


def lfs_pointer(oid: str, size: int) -> bytes:
    """The pointer file that stands in a Git tree for an object."""
    if not is_valid_oid(oid) or size < 0:
        raise ValueError(f"invalid LFS object {oid!r} / {size!r}")
    return f"version {POINTER_VERSION}\noid sha256:{oid}\nsize {size}\n".encode()


def href_for_store(
    store: ArtifactStore, object_base_url: str, *, expires: timedelta = timedelta(hours=1)
) -> Callable[[str], str]:
    """Where clients download: the store's presigned URL, else ``<object_base_url>/<oid>``."""
    base = object_base_url.rstrip("/")

    def href(oid: str) -> str:
        return store.download_url(oid, expires) or f"{base}/{oid}"

    return href


def lfs_batch_response(
    store: ArtifactStore,
    request_json: Mapping[str, Any] | str | bytes,
    href_for: Callable[[str], str],
    *,
    expires_in: int | None = 3600,
) -> dict[str, Any]:
    """The body of a 200 answer to a download batch request (see the module doc)."""
    request = _parse_request(request_json)
    _check_request(request)
    objects = [_object_response(store, item, href_for, expires_in) for item in request["objects"]]
    return {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}


def _parse_request(request_json: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    raw: Any = request_json
    if isinstance(request_json, str | bytes):
        try:
            raw = json.loads(request_json)
        except ValueError as exc:
            raise RequestError(422, "invalid_lfs_batch", f"batch body is not JSON: {exc}") from exc
    if not isinstance(raw, Mapping) or not isinstance(raw.get("objects"), list):
        raise RequestError(422, "invalid_lfs_batch", "batch body needs an 'objects' list")
    return raw


def _check_request(request: Mapping[str, Any]) -> None:
    operation = request.get("operation")
    if operation == "upload":
        raise RequestError(
            403, "lfs_read_only", "Reef's LFS endpoint is read-only; publish releases via Reef"
        )
    if operation != "download":
        raise RequestError(422, "invalid_lfs_batch", f"unknown operation {operation!r}")
    transfers = request.get("transfers") or ["basic"]
    if not isinstance(transfers, list) or "basic" not in transfers:
        raise RequestError(422, "invalid_lfs_batch", "only the 'basic' transfer is offered")
    if request.get("hash_algo", "sha256") != "sha256":
        raise RequestError(409, "lfs_hash_algo", "only sha256 objects are stored")
    if len(request["objects"]) > MAX_BATCH_OBJECTS:
        raise RequestError(413, "lfs_batch_too_large", f"at most {MAX_BATCH_OBJECTS} objects")


def _object_response(
    store: ArtifactStore,
    item: Any,
    href_for: Callable[[str], str],
    expires_in: int | None,
) -> dict[str, Any]:
    oid = item.get("oid") if isinstance(item, Mapping) else None
    size = item.get("size") if isinstance(item, Mapping) else None
    echo: dict[str, Any] = {"oid": str(oid), "size": size if isinstance(size, int) else 0}
    valid_size = isinstance(size, int) and not isinstance(size, bool) and size >= 0
    if not is_valid_oid(oid) or not valid_size:
        return {**echo, "error": {"code": 422, "message": "invalid oid or size"}}
    try:
        stored = store.size(oid)
    except ArtifactNotFoundError:
        return {**echo, "error": {"code": 404, "message": "object does not exist"}}
    if stored != size:
        return {**echo, "error": {"code": 422, "message": f"object has {stored} bytes"}}
    action: dict[str, Any] = {"href": href_for(oid)}
    if expires_in is not None:
        action["expires_in"] = expires_in
    return {**echo, "authenticated": True, "actions": {"download": action}}
