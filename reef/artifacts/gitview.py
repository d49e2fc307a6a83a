"""The release chain as a real Git repository that stock ``git`` + ``git lfs`` can clone.

One commit per release, parents before children, each commit's parent being its
parent release's commit; ``refs/heads/main`` (HEAD) points at the head release and
``refs/tags/release-<release_id>`` at every release. Commits are deterministic
(fixed author, dates from ``created_at``), so exporting the same chain twice gives
the same commit ids.

Each tree holds the release's files plus two generated top-level files:

* ``.gitattributes`` marking LFS files ``filter=lfs diff=lfs merge=lfs -text``;
* ``.lfsconfig`` naming Reef's LFS endpoint (``[lfs] url = <lfs_url>``).

LFS files (stored as pointer blobs, see :func:`reef.artifacts.lfs.lfs_pointer`):
weights (:data:`WEIGHT_SUFFIXES`), binary files under an ``adapter``/``adapters``
directory, and any file above ``max_blob_size``. Everything else (harness text,
configs) is an ordinary blob.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from dulwich.index import commit_tree
from dulwich.object_store import MemoryObjectStore
from dulwich.objects import Blob, Commit, ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from reef.artifacts.errors import ArtifactError
from reef.artifacts.lfs import LFS_MEDIA_TYPE, href_for_store, lfs_batch_response, lfs_pointer
from reef.artifacts.manifest import Manifest, ManifestEntry
from reef.artifacts.store import ArtifactStore
from reef.core.ids import canonical_json

__all__ = [
    "LFS_MEDIA_TYPE",
    "GitExport",
    "GitRelease",
    "export_git",
    "href_for_store",
    "lfs_batch_response",
    "lfs_pointer",
]

WEIGHT_SUFFIXES: Final = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
ADAPTER_DIRS: Final = frozenset({"adapter", "adapters"})
DEFAULT_MAX_BLOB_SIZE: Final = 16 * 1024 * 1024
AUTHOR: Final = b"Reef <reef@reef.invalid>"
_LFS_ATTRS: Final = "filter=lfs diff=lfs merge=lfs -text"
_SNIFF_BYTES: Final = 8000
_REF_SAFE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


@dataclass(frozen=True, slots=True)
class GitRelease:
    """What the Git view needs of a release."""

    release_id: str
    parent_release_id: str | None
    operation: str
    manifest: Manifest
    metrics: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime = datetime(1970, 1, 1, tzinfo=UTC)

    @classmethod
    def coerce(cls, value: object) -> GitRelease:
        """From a GitRelease, a mapping or an object with the same names.

        ``manifest`` may also be called ``content`` or ``content_manifest`` and be a
        Manifest, a JSON object or JSON text; ``metrics`` may be ``metrics_json``;
        ``created_at`` a datetime, ISO text or epoch milliseconds (Avro's timestamp).
        """
        if isinstance(value, GitRelease):
            return value
        manifest = _field(value, "manifest", "content", "content_manifest")
        return cls(
            release_id=str(_field(value, "release_id")),
            parent_release_id=_field(value, "parent_release_id", default=None),
            operation=str(_field(value, "operation")),
            manifest=manifest if isinstance(manifest, Manifest) else Manifest.from_json(manifest),
            metrics=_metrics(_field(value, "metrics", "metrics_json", default={})),
            created_at=_timestamp(_field(value, "created_at", "occurred_at", default=0)),
        )


@dataclass(frozen=True, slots=True)
class GitExport:
    """The exported repository: where it is and which commit holds each release."""

    path: Path
    head: str
    commits: dict[str, str]


_MISSING: Final = object()


def _field(value: object, *names: str, default: Any = _MISSING) -> Any:
    for name in names:
        if isinstance(value, Mapping) and name in value:
            return value[name]
        if not isinstance(value, Mapping) and hasattr(value, name):
            return getattr(value, name)
    if default is _MISSING:
        raise ArtifactError(f"release has no {names[0]!r}")
    return default


def _metrics(value: Any) -> Mapping[str, Any]:
    try:
        parsed = json.loads(value) if isinstance(value, str | bytes) else value
    except ValueError as exc:
        raise ArtifactError(f"release metrics are not JSON: {exc}") from exc
    if not isinstance(parsed, Mapping):
        raise ArtifactError("release metrics must be a JSON object")
    return parsed


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            return _timestamp(datetime.fromisoformat(value))
        except ValueError as exc:
            raise ArtifactError(f"release created_at is not ISO 8601: {value!r}") from exc
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC)
    raise ArtifactError(f"release created_at is not a time: {value!r}")


# -- export ---------------------------------------------------------------------------


def export_git(
    releases: Iterable[object],
    store: ArtifactStore,
    dest_dir: Path,
    lfs_url: str,
    *,
    head: str | None = None,
    max_blob_size: int = DEFAULT_MAX_BLOB_SIZE,
) -> GitExport:
    """Write the chain as a bare Git repository at ``dest_dir`` (which must not exist).

    ``head`` (default: the last release in chain order) is what ``main`` points at.
    The repository is built beside ``dest_dir`` and renamed into place when complete.
    """
    if "\n" in lfs_url or not lfs_url:
        raise ArtifactError(f"invalid LFS url {lfs_url!r}")
    chain = chain_order([GitRelease.coerce(r) for r in releases])
    writer = _TreeWriter(store, lfs_url, max_blob_size)
    commits: dict[str, str] = {}
    for release in chain:
        parent = commits.get(release.parent_release_id or "")
        tree = writer.tree(release.manifest)
        commits[release.release_id] = _commit(writer.objects, release, tree, parent)
    head_id = head or chain[-1].release_id
    if head_id not in commits:
        raise ArtifactError(f"head {head_id} is not among the releases")
    dest = Path(dest_dir)
    _write_repository(writer.objects, commits, head_id, dest)
    return GitExport(dest, commits[head_id], commits)


def chain_order(releases: Sequence[GitRelease]) -> list[GitRelease]:
    """Parents before children, otherwise in the given order; ArtifactError if broken."""
    if not releases:
        raise ArtifactError("no releases to export")
    index = {r.release_id: i for i, r in enumerate(releases)}
    if len(index) != len(releases):
        raise ArtifactError("release ids repeat")
    children: dict[str, list[int]] = {}
    ready: list[int] = []
    for i, release in enumerate(releases):
        if not _REF_SAFE.fullmatch(release.release_id):
            raise ArtifactError(f"release id {release.release_id!r} cannot name a Git tag")
        parent = release.parent_release_id
        if parent is None:
            ready.append(i)
        elif parent in index:
            children.setdefault(parent, []).append(i)
        else:
            raise ArtifactError(f"{release.release_id}: parent {parent} is not exported")
    ordered: list[GitRelease] = []
    while ready:
        release = releases[heapq.heappop(ready)]
        ordered.append(release)
        for child in children.get(release.release_id, ()):
            heapq.heappush(ready, child)
    if len(ordered) != len(releases):
        raise ArtifactError("the releases' parent links form a cycle")
    return ordered


class _TreeWriter:
    """Builds release trees into one object store, fetching each text object once."""

    def __init__(self, store: ArtifactStore, lfs_url: str, max_blob_size: int) -> None:
        self.objects = MemoryObjectStore()
        self._store = store
        self._lfsconfig = self._add(_lfsconfig(lfs_url))
        self._max_blob_size = max_blob_size
        self._blob_ids: dict[str, ObjectID] = {}
        self._binary: dict[str, bool] = {}

    def tree(self, manifest: Manifest) -> ObjectID:
        entries: list[tuple[bytes, ObjectID, int]] = []
        explicit_lfs: list[str] = []
        for path, entry in manifest.items():
            if self._is_lfs(path, entry):
                blob_id = self._add(lfs_pointer(entry.oid, entry.size))
                if not path.endswith(WEIGHT_SUFFIXES):
                    explicit_lfs.append(path)
            else:
                blob_id = self._text_blob(entry.oid)
            entries.append((path.encode(), blob_id, int(entry.mode, 8)))
        entries.append((b".gitattributes", self._add(_gitattributes(explicit_lfs)), 0o100644))
        entries.append((b".lfsconfig", self._lfsconfig, 0o100644))
        return commit_tree(self.objects, entries)

    def _add(self, body: bytes) -> ObjectID:
        blob = Blob.from_string(body)
        self.objects.add_object(blob)
        return blob.id

    def _text_blob(self, oid: str) -> ObjectID:
        if oid not in self._blob_ids:
            self._blob_ids[oid] = self._add(self._store.get_bytes(oid))
        return self._blob_ids[oid]

    def _is_lfs(self, path: str, entry: ManifestEntry) -> bool:
        if path.endswith(WEIGHT_SUFFIXES) or entry.size > self._max_blob_size:
            return True
        if not any(part in ADAPTER_DIRS for part in path.split("/")[:-1]):
            return False
        if entry.oid not in self._binary:
            self._binary[entry.oid] = _looks_binary(self._store, entry.oid)
        return self._binary[entry.oid]


def _looks_binary(store: ArtifactStore, oid: str) -> bool:
    """Git's test (a NUL in the first 8000 bytes), or bytes that are not UTF-8."""
    with store.open(oid) as reader:
        head = reader.read(_SNIFF_BYTES)
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a character cut by the sniff boundary is not evidence of binary content
        return not (len(head) == _SNIFF_BYTES and exc.reason == "unexpected end of data")
    return False


def _gitattributes(explicit_lfs: Iterable[str]) -> bytes:
    lines = [f"*{suffix} {_LFS_ATTRS}" for suffix in WEIGHT_SUFFIXES]
    lines += [f"/{_escape_pattern(path)} {_LFS_ATTRS}" for path in sorted(explicit_lfs)]
    return ("\n".join(lines) + "\n").encode()


def _escape_pattern(path: str) -> str:
    """A literal path as a gitattributes pattern (as ``git lfs track`` writes spaces)."""
    out = []
    for char in path:
        if char in "*?[\\":
            out.append("\\" + char)
        elif char == " ":
            out.append("[[:space:]]")
        else:
            out.append(char)
    return "".join(out)


def _lfsconfig(lfs_url: str) -> bytes:
    return f"[lfs]\n\turl = {lfs_url}\n".encode()


def _commit(
    objects: MemoryObjectStore, release: GitRelease, tree: ObjectID, parent: str | None
) -> str:
    commit = Commit()
    commit.tree = tree
    commit.parents = [ObjectID(parent.encode())] if parent else []
    commit.author = commit.committer = AUTHOR
    when = int(release.created_at.timestamp())
    commit.author_time = commit.commit_time = when
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    commit.message = _message(release).encode()
    objects.add_object(commit)
    return commit.id.decode()


def _message(release: GitRelease) -> str:
    return (
        f"{release.operation}: release {release.release_id}\n\n"
        f"Release-Id: {release.release_id}\n"
        f"Parent-Release-Id: {release.parent_release_id or '(none)'}\n"
        f"Operation: {release.operation}\n"
        f"Content-Id: {release.manifest.content_id}\n"
        f"Metrics: {canonical_json(dict(release.metrics))}\n"
    )


def _write_repository(
    objects: MemoryObjectStore, commits: Mapping[str, str], head: str, dest: Path
) -> None:
    if dest.exists():
        raise ArtifactError(f"{dest} already exists")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    except OSError as exc:
        raise ArtifactError(f"cannot create {dest.parent}: {exc}") from exc
    try:
        repo = Repo.init_bare(tmp, default_branch=b"main")
        try:
            repo.object_store.add_objects([(objects[sha], None) for sha in objects])
            repo.refs[Ref(b"refs/heads/main")] = ObjectID(commits[head].encode())
            for release_id, commit in commits.items():
                tag = Ref(f"refs/tags/release-{release_id}".encode())
                repo.refs[tag] = ObjectID(commit.encode())
        finally:
            repo.close()
        os.rename(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"cannot write the Git view to {dest}: {exc}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
