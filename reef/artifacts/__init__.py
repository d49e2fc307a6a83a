"""Artifacts: content-addressed object stores, release manifests, claim checks, the Git view.

The port is :class:`ArtifactStore` with two adapters, :class:`LocalArtifactStore`
(a directory, embedded mode) and :class:`S3ArtifactStore` (any S3-compatible
bucket). Everything is synchronous and blocking; async callers use
``asyncio.to_thread``.
"""

from __future__ import annotations

from reef.artifacts.claimcheck import ClaimCheck
from reef.artifacts.errors import (
    ArtifactCorruptError,
    ArtifactError,
    ArtifactNotFoundError,
    UnsafePathError,
)
from reef.artifacts.local import LocalArtifactStore
from reef.artifacts.manifest import (
    Manifest,
    ManifestEntry,
    materialise,
    materialise_cached,
    missing_objects,
    publish_dir,
    publish_files,
)
from reef.artifacts.store import ArtifactStore, ObjectRef, VerifiedReader

__all__ = [
    "ArtifactCorruptError",
    "ArtifactError",
    "ArtifactNotFoundError",
    "ArtifactStore",
    "ClaimCheck",
    "LocalArtifactStore",
    "Manifest",
    "ManifestEntry",
    "ObjectRef",
    "UnsafePathError",
    "VerifiedReader",
    "materialise",
    "materialise_cached",
    "missing_objects",
    "publish_dir",
    "publish_files",
]
