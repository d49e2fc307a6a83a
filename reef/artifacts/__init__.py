"""Artifacts: content-addressed object stores, release manifests, claim checks, the Git view.

The port is :class:`ArtifactStore` with two adapters, :class:`LocalArtifactStore`
(a directory, embedded mode) and :class:`S3ArtifactStore` (any S3-compatible
bucket), chosen by :func:`open_store` from settings. Everything is synchronous and
blocking; async callers use ``asyncio.to_thread``.
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
from reef.core.errors import ConfigError
from reef.settings import Settings

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
    "open_store",
    "publish_dir",
    "publish_files",
]


def open_store(settings: Settings) -> ArtifactStore:
    """The artifact store the settings name (the S3 client is loaded only for S3)."""
    if settings.artifacts.backend == "s3":
        if settings.s3.access_key is None or settings.s3.secret_key is None:
            raise ConfigError("artifacts: s3 needs REEF_S3_ACCESS_KEY and REEF_S3_SECRET_KEY")
        from reef.artifacts.s3 import S3ArtifactStore

        return S3ArtifactStore(
            settings.s3.endpoint,
            access_key=settings.s3.access_key.get_secret_value(),
            secret_key=settings.s3.secret_key.get_secret_value(),
            bucket=settings.s3.bucket,
            region=settings.s3.region,
            prefix=settings.s3.prefix,
        )
    return LocalArtifactStore.in_state_dir(settings.deployment.state_dir)
