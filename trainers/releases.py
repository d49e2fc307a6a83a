"""The folders of the releases a trainer trains from: a release's content materialised
from the content store into a cache under the trainer's work dir (each content id once,
:func:`reef.artifacts.materialise_cached`). The empty content (a scenario's creation
release with no seed) has no folder: the recipe's built-in base."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reef.artifacts import materialise_cached
from reef.artifacts.content import ContentStore
from reef.core.ids import EMPTY_CONTENT_ID


class ReleaseFolders:
    """Opens a release's files by content id, into ``cache``."""

    def __init__(self, content: ContentStore, cache: Path) -> None:
        self.content = content
        self.cache = cache

    def open(self, content_id: str) -> Path | None:
        """The release's folder (blocking: recipes call it in worker threads)."""
        if content_id == EMPTY_CONTENT_ID:
            return None
        manifest = self.content.load(content_id)
        return materialise_cached(self.content.store, manifest, self.cache)

    async def materialise(self, content_id: str) -> Path | None:
        """:meth:`open` from the event loop (the store is read in worker threads)."""
        if content_id == EMPTY_CONTENT_ID:
            return None
        manifest = await asyncio.to_thread(self.content.load, content_id)
        return await asyncio.to_thread(materialise_cached, self.content.store, manifest, self.cache)
