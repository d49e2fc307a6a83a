"""A release's content: a manifest {path → oid, size, mode}, and moving trees in and out.

The manifest's canonical JSON (sorted keys, no whitespace, UTF-8; see
:func:`reef.core.ids.canonical_json`) is ``{"<path>": {"mode": "100644", "oid": "<sha256>",
"size": <n>}, ...}``; its sha256 is the release's ``content_id`` (the empty manifest
hashes to :data:`reef.core.ids.EMPTY_CONTENT_ID`).

Paths are checked when a manifest is built, so an unsafe tree is refused at publish
time and an unsafe manifest (from JSON) is refused before anything is written: see
:func:`validate_path`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from reef.artifacts.errors import (
    ArtifactCorruptError,
    ArtifactError,
    ArtifactNotFoundError,
    UnsafePathError,
)
from reef.artifacts.store import ArtifactStore, fsync_dir, is_valid_oid
from reef.core.ids import canonical_json, content_hash

MODE_FILE: Final = "100644"
MODE_EXECUTABLE: Final = "100755"
MODES: Final = frozenset({MODE_FILE, MODE_EXECUTABLE})

#: written by the Git view at the top of every exported tree
RESERVED_PATHS: Final = frozenset({".gitattributes", ".lfsconfig"})
_MAX_NAME_BYTES: Final = 255


def validate_path(path: str) -> str:
    """Accept only a plain relative POSIX path: ``a/b.txt``, never ``/a``, ``a/../b``…

    Refused: empty names, absolute paths, ``.``/``..`` components, empty components
    (``a//b``, trailing ``/``), backslashes, control characters, names that are not
    UTF-8, ``.git`` components, and the Git view's own top-level files.
    """
    if not isinstance(path, str) or not path:
        raise UnsafePathError(str(path), "not a non-empty string")
    if path.startswith("/"):
        raise UnsafePathError(path, "absolute path")
    if "\\" in path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise UnsafePathError(path, "backslash or control character")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsafePathError(path, "not valid UTF-8") from exc
    for part in path.split("/"):
        _validate_component(path, part)
    if path in RESERVED_PATHS:
        raise UnsafePathError(path, "reserved for the Git view")
    return path


def _validate_component(path: str, part: str) -> None:
    if part in ("", ".", ".."):
        raise UnsafePathError(path, f"component {part!r} is not allowed")
    if part.casefold() == ".git":
        raise UnsafePathError(path, "a .git component is not allowed")
    if len(part.encode("utf-8")) > _MAX_NAME_BYTES:
        raise UnsafePathError(path, "a component is longer than 255 bytes")


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One file of a release: the object holding its bytes and its Git file mode."""

    oid: str
    size: int
    mode: str = MODE_FILE

    def __post_init__(self) -> None:
        if not is_valid_oid(self.oid):
            raise ArtifactError(f"manifest entry has an invalid oid: {self.oid!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ArtifactError(f"manifest entry has an invalid size: {self.size!r}")
        if self.mode not in MODES:
            raise ArtifactError(f"manifest entry has an invalid mode: {self.mode!r}")

    @property
    def executable(self) -> bool:
        return self.mode == MODE_EXECUTABLE

    def as_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "oid": self.oid, "size": self.size}


class Manifest(Mapping[str, ManifestEntry]):
    """An immutable, validated {path → entry} mapping; equal content, equal content_id."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Mapping[str, ManifestEntry] | None = None) -> None:
        items = dict(entries or {})
        validate_tree(items)
        self._entries = dict(sorted(items.items()))

    def __getitem__(self, path: str) -> ManifestEntry:
        return self._entries[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Manifest({len(self)} files, content_id={self.content_id[:12]}…)"

    @property
    def content_id(self) -> str:
        """sha256 hex of the canonical JSON: the release's content identity."""
        return content_hash(self.as_json())

    @property
    def total_size(self) -> int:
        return sum(entry.size for entry in self._entries.values())

    def as_json(self) -> dict[str, dict[str, Any]]:
        return {path: entry.as_json() for path, entry in self._entries.items()}

    def to_json(self) -> str:
        return canonical_json(self.as_json())

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Manifest:
        """Parse and validate (paths, oids, sizes, modes); ArtifactError if malformed."""
        raw: Any = data
        if isinstance(data, str | bytes):
            try:
                raw = json.loads(data)
            except ValueError as exc:
                raise ArtifactError(f"manifest is not JSON: {exc}") from exc
        if not isinstance(raw, Mapping):
            raise ArtifactError("manifest must be a JSON object {path: entry}")
        return cls({path: _entry_from_json(path, value) for path, value in raw.items()})


def _entry_from_json(path: str, value: Any) -> ManifestEntry:
    if not isinstance(value, Mapping) or set(value) - {"oid", "size", "mode"}:
        raise ArtifactError(f"manifest entry for {path!r} must be {{oid, size, mode}}")
    try:
        return ManifestEntry(value["oid"], value["size"], value.get("mode", MODE_FILE))
    except KeyError as exc:
        raise ArtifactError(f"manifest entry for {path!r} lacks {exc}") from exc


def validate_tree(paths: Collection[str]) -> None:
    """Every path safe, and no path both a file and a directory (``a`` and ``a/b``)."""
    for path in paths:
        validate_path(path)
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if prefix in paths:
                raise UnsafePathError(path, f"{prefix!r} is a file, not a directory")


# -- publishing -----------------------------------------------------------------------


def scan_tree(directory: Path) -> dict[str, tuple[Path, str]]:
    """Every regular file under ``directory``: {relative path → (file, mode)}.

    Refuses (UnsafePathError) symlinks, devices, sockets, FIFOs and unsafe names;
    nothing is uploaded until the whole tree has passed. Empty directories vanish.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ArtifactError(f"{root} is not a directory")
    found: dict[str, tuple[Path, str]] = {}
    pending = [("", root)]
    while pending:
        prefix, folder = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = prefix + entry.name
                _scan_entry(entry, rel, found, pending)
    return found


def _scan_entry(
    entry: os.DirEntry[str],
    rel: str,
    found: dict[str, tuple[Path, str]],
    pending: list[tuple[str, Path]],
) -> None:
    if entry.is_symlink():
        raise UnsafePathError(rel, "symbolic links are not allowed")
    if entry.is_dir(follow_symlinks=False):
        validate_path(rel)
        pending.append((rel + "/", Path(entry.path)))
    elif entry.is_file(follow_symlinks=False):
        executable = entry.stat(follow_symlinks=False).st_mode & stat.S_IXUSR
        found[validate_path(rel)] = (Path(entry.path), MODE_EXECUTABLE if executable else MODE_FILE)
    else:
        raise UnsafePathError(rel, "not a regular file or directory")


def publish_dir(store: ArtifactStore, directory: Path) -> Manifest:
    """Upload every file of a tree (streamed, idempotent) and return its manifest."""
    files = scan_tree(directory)
    entries: dict[str, ManifestEntry] = {}
    for path, (file, mode) in sorted(files.items()):
        ref = store.put_file(file)
        entries[path] = ManifestEntry(ref.oid, ref.size, mode)
    return Manifest(entries)


def publish_files(
    store: ArtifactStore,
    files: Mapping[str, bytes | str],
    *,
    executable: Collection[str] = (),
) -> Manifest:
    """Publish an in-memory tree (harness files); ``str`` bodies are stored as UTF-8."""
    validate_tree(files)
    entries: dict[str, ManifestEntry] = {}
    for path, body in sorted(files.items()):
        ref = store.put_bytes(body.encode("utf-8") if isinstance(body, str) else body)
        mode = MODE_EXECUTABLE if path in executable else MODE_FILE
        entries[path] = ManifestEntry(ref.oid, ref.size, mode)
    return Manifest(entries)


def missing_objects(store: ArtifactStore, manifest: Manifest) -> list[str]:
    """Oids the manifest names that the store lacks (or holds with another size), sorted.

    A manifest with any is not proposable: a release must never point at absent bytes.
    """
    missing: list[str] = []
    for oid, size in sorted({(e.oid, e.size) for e in manifest.values()}):
        try:
            if store.size(oid) != size:
                missing.append(oid)
        except ArtifactNotFoundError:
            missing.append(oid)
    return missing


# -- materialising --------------------------------------------------------------------


def materialise(store: ArtifactStore, manifest: Manifest, dest_dir: Path) -> Path:
    """Write the release's tree to ``dest_dir`` (which must not exist), all or nothing.

    The tree is built in a temp directory beside ``dest_dir``, every object verified
    against its oid and size, then renamed into place in one step.
    """
    dest = Path(dest_dir)
    if not _build_and_rename(store, manifest, dest):
        raise ArtifactError(f"{dest} already exists")
    return dest


def materialise_cached(store: ArtifactStore, manifest: Manifest, cache_root: Path) -> Path:
    """The release's tree at ``<cache_root>/<content_id>``, built once and then reused.

    Concurrent callers may both build; one rename wins and the other's copy is dropped.
    Callers must treat the returned tree as read-only.
    """
    dest = Path(cache_root) / manifest.content_id
    if dest.is_dir():
        return dest
    _build_and_rename(store, manifest, dest)
    return dest


def _build_and_rename(store: ArtifactStore, manifest: Manifest, dest: Path) -> bool:
    """False if ``dest`` already existed (or appeared meanwhile); the build is then dropped."""
    if dest.exists():
        return False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    except OSError as exc:
        raise ArtifactError(f"cannot create {dest.parent}: {exc}") from exc
    try:
        _fill(store, manifest, tmp)
        os.chmod(tmp, 0o755)  # noqa: S103 - mkdtemp's 0o700; a release tree reads like a checkout
        os.rename(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if dest.is_dir():
            return False
        raise ArtifactError(f"cannot materialise into {dest}: {exc}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(dest.parent)
    return True


def _fill(store: ArtifactStore, manifest: Manifest, root: Path) -> None:
    written: dict[str, Path] = {}
    for path, entry in manifest.items():
        target = root.joinpath(*path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.oid in written:
            shutil.copyfile(written[entry.oid], target)
        else:
            store.get_to_file(entry.oid, target)
            written[entry.oid] = target
        if target.stat().st_size != entry.size:
            raise ArtifactCorruptError(entry.oid, f"manifest says {entry.size} bytes for {path}")
        os.chmod(target, 0o755 if entry.executable else 0o644)
