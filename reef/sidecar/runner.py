"""The sidecar loop: bring one engine to its scenario's head and keep it there.

Order of work, written down once:

1. Fold ``reef.releases`` from the beginning to the end offsets into the scenario's head.
2. Load the head if the engine does not report it as its weight version (fresh start,
   or an engine that restarted and came back on its base weights).
3. Follow ``reef.releases``; every new serving head is loaded the same way. Every
   ``check_seconds`` the engine's reported version is compared with the head again.

One task follows the log and only folds it; one loop loads. A load that keeps failing
(a corrupted artifact, an unreachable engine) retries with backoff until it succeeds or
a newer head arrives, which cuts the wait short and is loaded instead.

Loading: the release's manifest is materialised from the artifact store into a cache
(every object sha256-verified; a corrupted object stops the load), then loaded with
``/update_weights_from_disk`` naming the release id as the weight version: a full
weights folder replaces the weights, a PEFT adapter folder becomes the engine's default
adapter on its base (``method`` lora), and the base release (empty content) reloads the
engine's own base model. Of a composite release (:mod:`reef.artifacts.parts`) only the
weights part is loaded (none: the base model). Only an
engine's ``success: true`` produces EngineLoaded; a refusal, a corrupted artifact or an
unreachable engine or store produces EngineLoadFailed and a retry with exponential
backoff (the engine keeps serving what it had). The committed consumer position of
group ``sidecar:<engine id>`` records the last release the engine acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from reef.artifacts import materialise_cached
from reef.artifacts.content import ContentStore
from reef.artifacts.parts import weights_folder
from reef.core import topics
from reef.core.errors import LogError, ReefError
from reef.core.events import EngineLoaded, EngineLoadFailed, utc_now
from reef.core.ids import EMPTY_CONTENT_ID, derived_id
from reef.engine.engine_client import AsyncEngineClient
from reef.log.base import LogRecord
from reef.log.partitioner import partition_for
from reef.services.eventstore import EventStore
from reef.sidecar.plan import HeadTracker, Wanted

logger = logging.getLogger(__name__)

ADAPTER_MARKER = "adapter_config.json"


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    engine_id: str
    scenario: str
    cache_dir: Path
    producer: str
    check_seconds: float = 2.0
    first_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0


class LoadRefusedError(ReefError):
    """The engine answered ``success: false``."""


class Sidecar:
    def __init__(
        self,
        config: SidecarConfig,
        store: EventStore,
        content: ContentStore,
        engine: AsyncEngineClient,
    ) -> None:
        self.config = config
        self.store = store
        self.content = content
        self.engine = engine
        self.tracker = HeadTracker(frozenset({config.scenario}))
        self.loaded: str | None = None
        self._base_path: str | None = None
        #: set by the follower when the scenario's head moved
        self._moved = asyncio.Event()

    async def run(self) -> None:
        """Forever: follow the chain and keep the engine on the head."""
        partition = partition_for(self.config.scenario.encode(), self.store.log.partitions)
        position = 0
        async for record in self.store.log.read(topics.RELEASES, partitions=[partition]):
            self._apply(record)
            position = record.offset + 1
        follower = asyncio.create_task(self._follow(partition, position), name="sidecar-follow")
        try:
            while True:
                self._moved.clear()
                await self._converge()
                await self._wait_for_head(self.config.check_seconds)
                if follower.done():
                    follower.result()  # it only ends by failing: surface that
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    async def _follow(self, partition: int, position: int) -> None:
        """Fold new releases as they arrive and wake the load loop on a new head.

        Loading happens only in :meth:`run`'s loop, never here: a load that keeps failing
        (a corrupted artifact) must not stop this task from seeing the next release.
        """
        backoff = self.config.first_backoff_seconds
        while True:
            try:
                async for record in self.store.log.read(
                    topics.RELEASES,
                    partitions=[partition],
                    start={partition: position},
                    follow=True,
                ):
                    position = record.offset + 1
                    backoff = self.config.first_backoff_seconds
                    if self._apply(record):
                        self._moved.set()
            except LogError as exc:
                logger.warning("reading %s failed (%s); retrying", topics.RELEASES, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.max_backoff_seconds)

    def _apply(self, record: LogRecord) -> bool:
        stored = self.store.decode(record)
        return stored.event is not None and self.tracker.apply(stored.event) is not None

    async def _wait_for_head(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a new head arrives meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._moved.wait(), seconds)

    async def _converge(self) -> None:
        """Load the head until the engine serves it (retries with backoff); returns early
        when a newer head arrives, so the caller loads that one instead."""
        wanted = self.tracker.heads.get(self.config.scenario)
        if wanted is None:
            return
        backoff = self.config.first_backoff_seconds
        attempt = 1
        while True:
            try:
                if await self._serving() == wanted.release_id:
                    return
                await self._load(wanted)
                return
            except (ReefError, OSError) as exc:
                logger.warning(
                    "load of %s failed (attempt %d): %s", wanted.release_id, attempt, exc
                )
                await self._report_failure(wanted, exc, attempt)
            await self._wait_for_head(backoff)
            if self.tracker.heads.get(self.config.scenario) != wanted:
                return  # a newer head arrived: load that one instead
            self._moved.clear()
            backoff = min(backoff * 2, self.config.max_backoff_seconds)
            attempt += 1

    async def _serving(self) -> str | None:
        info = await self.engine.model_info()
        if self._base_path is None:
            self._base_path = info.model_path
        return info.weight_version

    async def _load(self, wanted: Wanted) -> None:
        started = time.perf_counter()
        folder = weights_folder(await asyncio.to_thread(self._materialise, wanted.content_id))
        adapter = folder is not None and (folder / ADAPTER_MARKER).exists()
        method = "lora" if adapter else "disk"
        path = str(folder) if folder is not None else self._base_path
        if path is None:
            raise LoadRefusedError("no base model path to load")
        update = await self.engine.update_weights_from_disk(path, wanted.release_id)
        if not update.success:
            raise LoadRefusedError(update.message)
        version = (await self.engine.model_info()).weight_version or wanted.release_id
        load_ms = (time.perf_counter() - started) * 1000
        await self.store.append(
            EngineLoaded(
                event_id=derived_id(
                    "engine-loaded", self.config.engine_id, wanted.release_id, str(time.time_ns())
                ),
                scenario=self.config.scenario,
                occurred_at=utc_now(),
                producer=self.config.producer,
                engine_id=self.config.engine_id,
                release_id=wanted.release_id,
                weight_version=version,
                method=method,
                load_ms=load_ms,
            )
        )
        self.loaded = wanted.release_id
        logger.info(
            "engine %s serves %s (%s, %.0f ms)",
            self.config.engine_id,
            wanted.release_id,
            method,
            load_ms,
        )

    def _materialise(self, content_id: str) -> Path | None:
        """The release's files (verified), or None for the base weights (empty content)."""
        if content_id == EMPTY_CONTENT_ID:
            return None
        manifest = self.content.load(content_id)
        return materialise_cached(self.content.store, manifest, self.config.cache_dir)

    async def _report_failure(self, wanted: Wanted, exc: Exception, attempt: int) -> None:
        with contextlib.suppress(LogError):
            await self.store.append(
                EngineLoadFailed(
                    event_id=derived_id(
                        "engine-failed",
                        self.config.engine_id,
                        wanted.release_id,
                        str(attempt),
                        str(time.time_ns()),
                    ),
                    scenario=self.config.scenario,
                    occurred_at=utc_now(),
                    producer=self.config.producer,
                    engine_id=self.config.engine_id,
                    release_id=wanted.release_id,
                    error=f"{type(exc).__name__}: {exc}",
                    attempt=attempt,
                )
            )
