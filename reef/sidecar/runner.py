"""The sidecar loop: bring one engine to its scenario's head and keep it there.

Order of work, written down once:

1. Fold ``reef.releases`` from the beginning to the end offsets into the scenario's head.
2. Load the head if the engine does not report it as its weight version (fresh start,
   or an engine that restarted and came back on its base weights).
3. Follow ``reef.releases``; every new serving head is loaded the same way. Every
   ``check_seconds`` the engine's reported version is compared with the head again.

4. While the scenario has a rollout (:mod:`reef.core.rollouts`: active, or promoted and not
   yet committed), its candidate is loaded beside the head as a named slot, the release id
   its name and its weight version (``/load_lora_adapter``: a PEFT folder merged onto the
   base, a full-weights folder as a second model; the base release as the base model), so
   the exchanges the API routes to it (``x-reef-serve-release``) are answered by it and
   report it; the slot is unloaded when the rollout ends. A slot that fails to load is
   retried every ``check_seconds``; meanwhile the head answers those exchanges and they
   are recorded as the head's (``served_release_id``). A slot the engine no longer holds
   (it restarted on its base weights) is loaded again on the next round.

One task follows the log and only folds it; one loop loads. A load that keeps failing
(a corrupted artifact, an unreachable engine) retries with backoff until it succeeds or
a newer head arrives, which cuts the wait short and is loaded instead.

Loading: the release's manifest is materialised from the artifact store into a cache
(every object sha256-verified; a corrupted object stops the load). A PEFT adapter folder
is loaded by SGLang's protocol only (:mod:`reef.sidecar.adapters`): ``/load_lora_adapter``
under the release id (``method`` lora; the API names it in each exchange's ``lora_path``,
:mod:`reef.api.adapters`), and once it serves, the scenario's other adapters but the
canary slot's are unloaded with ``/unload_lora_adapter``. Otherwise the release is loaded
with ``/update_weights_from_disk`` naming the release id as the weight version: a full
weights folder replaces the weights, and the base release (empty content) reloads the
engine's own base model. With ``load_method`` tensor (setting ``engine_load_method``), a
full-weights folder is first sent by ``/update_weights_from_tensor`` (``method`` tensor;
an engine on the same machine); if that fails for any reason it is loaded from disk as
above (``method`` disk), and the failure is logged. With ``load_method`` broadcast or
pushed_tensor the trainer pushes the release (:mod:`reef.sidecar.pushed`): the sidecar
waits ``push_wait_s`` for the engine to report it (``method`` broadcast / tensor, also
when it arrived before the sidecar looked), then loads from disk. Of a composite release
(:mod:`reef.artifacts.parts`) only the weights part is loaded (none: the base model).
Only an engine's ``success: true`` produces EngineLoaded; a refusal, a corrupted artifact or an
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
from typing import Literal

from reef.artifacts import materialise_cached
from reef.artifacts.content import ContentStore
from reef.artifacts.parts import weights_folder
from reef.core import topics
from reef.core.errors import LogError, ReefError
from reef.core.events import EngineLoaded, EngineLoadFailed, ReleaseCommitted, utc_now
from reef.core.ids import EMPTY_CONTENT_ID, derived_id
from reef.core.rollouts import RolloutBook
from reef.engine.engine_client import AsyncEngineClient
from reef.log.base import LogRecord
from reef.log.partitioner import partition_for
from reef.services.eventstore import EventStore
from reef.sidecar.adapters import EngineAdapters
from reef.sidecar.plan import HeadTracker, Wanted
from reef.sidecar.pushed import PUSHED_METHODS, pushed

logger = logging.getLogger(__name__)

ADAPTER_MARKER = "adapter_config.json"


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    engine_id: str
    scenario: str
    cache_dir: Path
    producer: str
    #: how a full-weights release reaches the engine (tensor: disk when that fails;
    #: broadcast / pushed_tensor: pushed by the trainer, disk when it does not arrive in
    #: push_wait_s)
    load_method: Literal["disk", "tensor", "broadcast", "pushed_tensor"] = "disk"
    push_wait_s: float = 5.0
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
        self.adapters = EngineAdapters(engine)
        self.tracker = HeadTracker(frozenset({config.scenario}))
        self.loaded: str | None = None
        #: the scenario's rollouts, and the content of each of its releases (the slot's)
        self.rollouts = RolloutBook()
        self._contents: dict[str, str] = {}
        #: the release loaded in the canary slot
        self.slot: str | None = None
        self._base_path: str | None = None
        #: set by the follower when the scenario's head moved
        self._moved = asyncio.Event()
        #: the head when this sidecar started (not a push it could have seen arrive)
        self._first_head: str | None = None

    async def run(self) -> None:
        """Forever: follow the chain and keep the engine on the head."""
        partition = partition_for(self.config.scenario.encode(), self.store.log.partitions)
        position = 0
        async for record in self.store.log.read(topics.RELEASES, partitions=[partition]):
            self._apply(record)
            position = record.offset + 1
        first = self.tracker.heads.get(self.config.scenario)
        self._first_head = None if first is None else first.release_id
        follower = asyncio.create_task(self._follow(partition, position), name="sidecar-follow")
        try:
            while True:
                self._moved.clear()
                await self._converge()
                await self._converge_slot()
                await self._prune()
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
        """Fold one record; True when the head or the wanted slot changed."""
        event = self.store.decode(record).event
        if event is None or event.scenario != self.config.scenario:
            return False
        slot = self.wanted_slot()
        if isinstance(event, ReleaseCommitted):
            self._contents[event.release_id] = event.content_id
        self.rollouts.apply(event)
        return self.tracker.apply(event) is not None or self.wanted_slot() != slot

    def wanted_slot(self) -> str | None:
        """The candidate of the scenario's rollout while it serves beside the head."""
        view = self.rollouts.scenario(self.config.scenario)
        if view is None:
            return None
        rollout = view.active or view.promotion_pending
        return None if rollout is None else rollout.candidate_release_id

    async def _converge_slot(self) -> None:
        """Load the wanted candidate into the slot (unloading the one there before)."""
        wanted = self.wanted_slot()
        if wanted == self.slot and not await self._slot_lost():
            return
        try:
            if self.slot is not None:
                if self.slot not in self.adapters.releases:  # else promoted: the head's now
                    await self.engine.unload_lora_adapter(self.slot)
                    logger.info("engine %s unloaded slot %s", self.config.engine_id, self.slot)
                self.slot = None
            if wanted is not None:
                await self._load_slot(wanted)
        except (ReefError, OSError) as exc:  # retried on the next round
            logger.warning("slot %s: %s", wanted, exc)

    async def _slot_lost(self) -> bool:
        """Whether the engine no longer holds the slot this sidecar loaded (it restarted,
        or someone unloaded it): then it is loaded again. An engine that does not answer
        has lost nothing yet."""
        if self.slot is None:
            return False
        try:
            held = await self.engine.loaded_adapters()
        except (ReefError, OSError):
            return False
        if self.slot in held:
            return False
        logger.warning(
            "engine %s lost its canary slot %s; loading it again", self.config.engine_id, self.slot
        )
        self.slot = None
        return True

    async def _load_slot(self, release: str) -> None:
        folder = weights_folder(await asyncio.to_thread(self._materialise, self._contents[release]))
        path = str(folder) if folder is not None else self._base_path
        if path is None:
            raise LoadRefusedError("no base model path to load")
        result = await self.engine.load_lora_adapter(release, path, weight_version=release)
        if not result.success:
            raise LoadRefusedError(result.error_message or "the engine refused the slot")
        self.slot = release
        logger.info("engine %s serves %s in its canary slot", self.config.engine_id, release)

    async def _prune(self) -> None:
        """Once the head serves, unload the scenario's adapters but the head's and the
        slot's (retried on the next round when it fails)."""
        head = self.tracker.heads.get(self.config.scenario)
        if head is None or self.loaded != head.release_id:
            return
        keep = {name for name in (self.slot, self.wanted_slot()) if name is not None}
        if head.release_id in self.adapters.releases:
            keep.add(head.release_id)
        try:
            unloaded = await self.adapters.prune(self._contents, keep)
        except (ReefError, OSError) as exc:
            logger.warning("unloading superseded adapters: %s", exc)
            return
        for name in unloaded:
            logger.info("engine %s unloaded adapter %s", self.config.engine_id, name)

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
                if await self._serving() == wanted.release_id and not self._unrecorded_push(wanted):
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
        """The release the engine serves: its weight version, or while the sidecar's last
        load was an adapter, that adapter's release if the engine still holds it."""
        info = await self.engine.model_info()
        if self._base_path is None:
            self._base_path = info.model_path
        if self.loaded is not None and self.loaded in self.adapters.releases:
            return self.loaded if await self.adapters.serves(self.loaded) else None
        return info.weight_version

    async def _load(self, wanted: Wanted) -> None:
        started = time.perf_counter()
        folder = weights_folder(await asyncio.to_thread(self._materialise, wanted.content_id))
        adapter = folder is not None and (folder / ADAPTER_MARKER).exists()
        path = str(folder) if folder is not None else self._base_path
        if path is None:
            raise LoadRefusedError("no base model path to load")
        full = folder is not None and not adapter
        if adapter:
            await self.adapters.load(wanted.release_id, path)
            method = "lora"
        elif full and await self._loaded_by_tensor(Path(path), wanted.release_id):
            method = "tensor"
        elif full and (pushed_by := await self._pushed(wanted.release_id)) is not None:
            method = pushed_by
        else:
            update = await self.engine.update_weights_from_disk(path, wanted.release_id)
            if not update.success:
                raise LoadRefusedError(update.message)
            method = "disk"
        version = wanted.release_id
        if not adapter:  # what the engine reports of its default weights
            version = (await self.engine.model_info()).weight_version or version
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

    def _unrecorded_push(self, wanted: Wanted) -> bool:
        """A head the engine got pushed before this sidecar looked: record it as loaded."""
        return self.config.load_method in PUSHED_METHODS and wanted.release_id not in (
            self.loaded,
            self._first_head,
        )

    async def _pushed(self, release_id: str) -> str | None:
        """The method to record when the trainer's push of ``release_id`` reached the
        engine in time; None (the caller loads it from disk: logged) otherwise."""
        method = PUSHED_METHODS.get(self.config.load_method)
        if method is None:
            return None
        if await pushed(self.engine, release_id, self.config.push_wait_s):
            return method
        logger.warning(
            "%s was not pushed within %.1fs; loading from disk",
            release_id,
            self.config.push_wait_s,
        )
        return None

    async def _loaded_by_tensor(self, folder: Path, release_id: str) -> bool:
        """Whether the engine took ``folder`` by tensor; False when not configured, or when
        it failed (logged), so the caller loads from disk."""
        if self.config.load_method != "tensor":
            return False
        # torch only in a sidecar configured for tensor loads
        from reef.sidecar.tensor_load import update_from_folder

        try:
            result = await update_from_folder(self.engine, folder, release_id)
        except (ReefError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        else:
            if result.success:
                return True
            reason = result.message
        logger.warning("tensor load of %s failed (%s); loading from disk", release_id, reason)
        return False

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
