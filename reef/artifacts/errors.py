"""Errors of the artifact layer (a subtree of :class:`reef.core.errors.ReefError`).

    ReefError
    └── ArtifactError               the artifact store or a manifest failed
        ├── ArtifactNotFoundError   no object with that oid in the store
        ├── ArtifactCorruptError    stored bytes do not hash to their oid (or size)
        ├── UnsafePathError         a tree or manifest names a path that is not safe
        └── IncompleteContentError  a release's content misses objects (reef.releases)

The store adapters translate library errors (minio, urllib3, OSError) into these
once, with ``raise ... from exc``.
"""

from __future__ import annotations

from reef.core.errors import ReefError


class ArtifactError(ReefError):
    """The artifact store or a manifest failed; nothing half-written is visible."""


class ArtifactNotFoundError(ArtifactError):
    """The store holds no object with this oid."""

    def __init__(self, oid: str) -> None:
        super().__init__(f"artifact object {oid} not found")
        self.oid = oid


class ArtifactCorruptError(ArtifactError):
    """The bytes read back do not match the object's sha256 oid or size."""

    def __init__(self, oid: str, reason: str) -> None:
        super().__init__(f"artifact object {oid} is corrupt: {reason}")
        self.oid = oid


class UnsafePathError(ArtifactError):
    """A path is not a plain relative POSIX path inside the tree (or is a symlink, device…)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"unsafe path {path!r}: {reason}")
        self.path = path
