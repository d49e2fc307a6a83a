"""A scenario's LoRA adapters on one engine, through SGLang's protocol only.

An adapter release is loaded with ``/load_lora_adapter {lora_name, lora_path}`` under
its release id (the name the API puts in ``lora_path``, :mod:`reef.api.adapters`); the
engine's default weights are never touched by an adapter. Once the head serves, every
adapter of the scenario the engine holds is unloaded with ``/unload_lora_adapter``
except the head's and the canary slot's. A request already running on an unloaded
adapter finishes on it: Reef's engine resolves a request's adapter on the snapshot it
runs on (:meth:`reef.engine.model.Snapshot.resolve`), and unloading publishes a new
snapshot without touching the old one.

What the engine holds is read from ``GET /v1/models`` (the cards with a ``parent``), so
an engine that restarted without its adapters is noticed and a sidecar that restarted
does not load an adapter twice (a promoted canary's adapter is already there too).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from reef.engine.engine_client import AsyncEngineClient
from reef.engine.errors import AdapterError

logger = logging.getLogger(__name__)


class EngineAdapters:
    """Loads and unloads one engine's adapters, and remembers which releases are adapters."""

    def __init__(self, engine: AsyncEngineClient) -> None:
        self.engine = engine
        #: the releases this sidecar loaded (or found loaded) as adapters
        self.releases: set[str] = set()

    async def load(self, release_id: str, path: str) -> None:
        """Make the engine hold ``path`` as the adapter ``release_id`` (answers report the
        release id: Reef's engine reads ``weight_version``, SGLang ignores it)."""
        if release_id not in await self.engine.loaded_adapters():
            result = await self.engine.load_lora_adapter(
                release_id, path, weight_version=release_id
            )
            if not result.success:
                raise AdapterError(result.error_message or "the engine refused the adapter")
        self.releases.add(release_id)

    async def serves(self, release_id: str) -> bool:
        """Whether the engine holds the adapter ``release_id`` (one this sidecar loaded)."""
        return release_id in self.releases and release_id in await self.engine.loaded_adapters()

    async def prune(self, ours: Collection[str], keep: Collection[str]) -> list[str]:
        """Unload the adapters named in ``ours`` (the scenario's releases) but not in
        ``keep``; returns their names."""
        unloaded = []
        for name in await self.engine.loaded_adapters():
            if name not in ours or name in keep:
                continue
            result = await self.engine.unload_lora_adapter(name)
            if not result.success:
                raise AdapterError(result.error_message or f"the engine kept adapter {name}")
            self.releases.discard(name)
            unloaded.append(name)
        return unloaded
