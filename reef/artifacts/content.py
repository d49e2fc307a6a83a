"""Release content: manifests stored by content id in an artifact store.

A manifest's canonical JSON is itself stored in the artifact store, so its sha256, the
object id, IS the release's ``content_id``: any release can be materialised from the
store alone, for ever (weights included: this is what makes every release restorable).
"""

from __future__ import annotations

from pathlib import Path

from reef.artifacts.errors import ArtifactError
from reef.artifacts.manifest import Manifest, missing_objects, publish_dir, publish_files
from reef.artifacts.store import ArtifactStore
from reef.core.ids import EMPTY_CONTENT_ID


class IncompleteContentError(ArtifactError):
    """A manifest names objects the store does not hold; it must not be proposed."""


class ContentStore:
    """Manifests by content id over an artifact store."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    def save(self, manifest: Manifest) -> str:
        """Store the manifest (after checking every object it names is present)."""
        missing = missing_objects(self.store, manifest)
        if missing:
            raise IncompleteContentError(
                f"manifest names {len(missing)} missing object(s): {', '.join(missing[:3])}"
            )
        ref = self.store.put_bytes(manifest.to_json().encode())
        if ref.oid != manifest.content_id:
            raise ArtifactError("manifest encoding is not canonical")
        return manifest.content_id

    def load(self, content_id: str) -> Manifest:
        if content_id == EMPTY_CONTENT_ID:
            return Manifest()
        return Manifest.from_json(self.store.get_bytes(content_id))

    def publish_dir(self, directory: Path) -> str:
        return self.save(publish_dir(self.store, directory))

    def publish_files(self, files: dict[str, bytes | str]) -> str:
        return self.save(publish_files(self.store, files))

    def read_text_files(self, content_id: str) -> dict[str, str]:
        """Every file of a release as text (harness trees); binary files are skipped."""
        out = {}
        for path, entry in self.load(content_id).items():
            try:
                out[path] = self.store.get_bytes(entry.oid).decode("utf-8")
            except UnicodeDecodeError:
                continue
        return out
