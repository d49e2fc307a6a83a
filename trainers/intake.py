"""The sample intake of a trainer: reading ``reef.samples``, admission, and the offsets its
group commits (steps 2 and 7 of :mod:`trainers.consumer`).

Each record read is *ingested*. A sample of a scenario bound to another recipe is passed
over; one already consumed by a committed release, a shadow exchange's, an erased or
unreadable one, or one the recipe does not admit is skipped with its reason counted. A
sample served by a release the chain has not committed yet is *held* and admitted on a
later catch-up (:meth:`SampleIntake.admit_unresolved`), or skipped as ``unknown_release``
once it has waited ``release_wait_s``. The rest wait in the batcher.

A sample is *pending* from the moment it is held or admitted until it is skipped or the
batch that took it is decided (:meth:`SampleIntake.decided`). Per owned partition the
committed offset is that of the oldest pending sample, else the read position: it never
passes a sample not yet decided, so a crash rereads it (and step 2 skips it if a release
consumed it meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from recipes.base import Batch, MissingGroupKeyError, Recipe
from recipes.samples import ClaimResolver, Sample, sample_from_event
from reef.core import topics
from reef.core.errors import ReefError
from reef.core.events import SampleJoined
from reef.core.shadow import trains
from reef.log.base import LogRecord
from reef.services.eventstore import EventStore, StoredEvent
from trainers.batcher import Batcher
from trainers.chainview import ChainFollower
from trainers.config import TrainerConfig
from trainers.progress import Progress

logger = logging.getLogger("reef.trainer")

#: records read ahead of ingestion
QUEUE_SIZE = 1000


class SampleIntake:
    """Reads the owned partitions of ``reef.samples`` into the batcher and commits the
    group's offsets behind every pending sample."""

    def __init__(
        self,
        recipe: Recipe[Any],
        store: EventStore,
        chain: ChainFollower,
        batcher: Batcher,
        progress: Progress,
        config: TrainerConfig,
        *,
        resolve: ClaimResolver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.recipe = recipe
        self.store = store
        self.chain = chain
        self.batcher = batcher
        self.progress = progress
        self.config = config
        #: reads claim-checked bodies of a sample's trajectory
        self.resolve = resolve
        self.clock = clock
        self._read: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        #: sample id → (partition, offset) of each pending sample
        self._pending: dict[str, tuple[int, int]] = {}
        #: samples held until the chain commits the release that served them: id → (first
        #: seen, by ``clock``; the sample); they are pending
        self._unresolved: dict[str, tuple[float, Sample]] = {}
        self._queue: asyncio.Queue[LogRecord] = asyncio.Queue(maxsize=QUEUE_SIZE)

    # -- reading ------------------------------------------------------------------------

    def owned(self) -> list[int]:
        """The partitions of ``reef.samples`` this trainer reads."""
        if self.config.partitions is not None:
            return list(self.config.partitions)
        return list(range(self.store.log.partitions))

    async def start(self) -> dict[int, int]:
        """Start from the group's committed offsets (0 where none); returns them."""
        committed = await self.store.log.committed(self.config.group, topics.SAMPLES)
        self._read = {p: committed.get(p, 0) for p in self.owned()}
        self._committed = dict(self._read)
        return dict(self._read)

    async def follow(self) -> None:
        """Read the owned partitions from the start positions into the queue, until
        cancelled (the reader task)."""
        records = self.store.log.read(
            topics.SAMPLES, start=dict(self._read), partitions=self.owned(), follow=True
        )
        async for record in records:
            await self._queue.put(record)

    async def next(self, wait_s: float) -> LogRecord | None:
        """The next record read, or None when none came within ``wait_s`` seconds."""
        try:
            return await asyncio.wait_for(self._queue.get(), wait_s)
        except TimeoutError:
            return None

    def drained(self) -> bool:
        """Whether every record read so far was ingested."""
        return self._queue.empty()

    # -- admission ----------------------------------------------------------------------

    async def ingest(self, record: LogRecord) -> None:
        """Read past ``record``; admit, hold or skip the sample it holds."""
        self._read[record.partition] = record.offset + 1
        stored = self.store.decode(record)
        event = stored.event
        if not isinstance(event, SampleJoined) or not await self._ours(event):
            return
        self.progress.samples_read += 1
        if not trains(event):  # it holds a shadow copy: it scored a candidate, it never trains
            self.skip(event.event_id, event.scenario, "shadow_exchange")
            return
        if self._known(event):
            return
        sample = await self._sample(stored, event)
        if sample is not None:
            self._admit(sample)

    async def _ours(self, event: SampleJoined) -> bool:
        """Whether the sample's scenario is bound to this recipe (the chain caught up first
        when the scenario or a release that served the sample is not known yet)."""
        view = self.chain.view
        if event.scenario not in view.recipes or (
            view.staleness(event.scenario, event.release_ids) is None
        ):
            await self.chain.catch_up()
        return self.chain.view.recipes.get(event.scenario) == self.config.recipe_name

    def _known(self, event: SampleJoined) -> bool:
        """Whether the sample is consumed (counted, not logged: a restart rereads many),
        pending already, or held."""
        if event.event_id in self.chain.view.consumed:
            self.progress.skip(event.event_id, event.scenario, "already_consumed")
            return True
        return event.event_id in self.batcher or event.event_id in self._unresolved

    async def _sample(self, stored: StoredEvent, event: SampleJoined) -> Sample | None:
        """The sample, its sealed trajectory opened; None (skipped) when it cannot be."""
        stored = await self.store.open(stored)
        if stored.erased or not isinstance(stored.event, SampleJoined):
            # a record of it was erased (its content is gone), or it does not open
            self.skip(event.event_id, event.scenario, "erased", stored.error or "")
            return None
        event = stored.event
        try:
            return await asyncio.to_thread(
                sample_from_event,
                event,
                partition=stored.record.partition,
                offset=stored.record.offset,
                resolve=self.resolve,
            )
        except ReefError as exc:
            self.skip(event.event_id, event.scenario, "unreadable", str(exc))
            return None

    def _admit(self, sample: Sample) -> None:
        reason = self.reason(sample)
        if reason == "unknown_release" and self._wait_for_release(sample):
            return
        self._unresolved.pop(sample.sample_id, None)
        if reason is not None:
            self.skip(sample.sample_id, sample.scenario, reason)
            return
        try:
            group = self.recipe.group_of(sample)
        except MissingGroupKeyError as exc:
            self.skip(sample.sample_id, sample.scenario, "missing_group_key", str(exc))
            return
        self.batcher.add(sample, group)
        self._pending[sample.sample_id] = (sample.partition, sample.offset)

    def _wait_for_release(self, sample: Sample) -> bool:
        """Hold a sample whose serving release the chain has not committed (yet); False
        once it has waited ``release_wait_s`` (then it is skipped as ``unknown_release``)."""
        now = self.clock()
        since = self._unresolved.get(sample.sample_id, (now, sample))[0]
        if now - since >= self.config.release_wait_s:
            return False
        self._unresolved[sample.sample_id] = (since, sample)
        self._pending[sample.sample_id] = (sample.partition, sample.offset)
        return True

    async def admit_unresolved(self) -> None:
        """Admit held samples whose release the chain has committed since (or that waited
        long enough to be skipped)."""
        if not self._unresolved:
            return
        await self.chain.catch_up()
        for _, sample in list(self._unresolved.values()):
            self._pending.pop(sample.sample_id, None)
            self._admit(sample)

    def reason(self, sample: Sample) -> str | None:
        """Why the sample is not (or no longer) trained on; None: it is admitted."""
        if sample.sample_id in self.chain.view.consumed:
            return "already_consumed"
        staleness = self.chain.view.staleness(sample.scenario, sample.release_ids)
        return self.recipe.admit(sample, staleness)

    def skip(self, sample_id: str, scenario: str, reason: str, detail: str = "") -> None:
        """Count and log a sample that is not trained on."""
        self.progress.skip(sample_id, scenario, reason, detail)
        logger.info("sample %s of %s skipped: %s %s", sample_id, scenario, reason, detail)

    # -- batches ------------------------------------------------------------------------

    def prune(self, scenario: str) -> None:
        """Skip the scenario's waiting samples that became stale or consumed meanwhile."""
        for sample, reason in self.batcher.prune(scenario, self.reason):
            self._pending.pop(sample.sample_id, None)
            self.skip(sample.sample_id, scenario, reason)

    def unconsumed(self, batch: Batch) -> Batch:
        """The batch without the units holding a sample another release consumed
        meanwhile (those samples skipped)."""
        consumed = self.chain.view.consumed
        groups = tuple(g for g in batch.groups if not any(s.sample_id in consumed for s in g))
        for group in batch.groups:
            if group not in groups:
                for sample in group:
                    self.skip(sample.sample_id, batch.scenario, "already_consumed")
        return Batch(batch.scenario, groups)

    def decided(self, sample_ids: list[str]) -> None:
        """The batch that took these samples is decided: they are no longer pending."""
        self.batcher.release(sample_ids)
        for sample_id in sample_ids:
            self._pending.pop(sample_id, None)

    # -- step 7: offsets ----------------------------------------------------------------

    async def commit(self) -> None:
        """Commit, per owned partition, the oldest pending sample's offset, else the read
        position (only the partitions whose offset moved)."""
        target = dict(self._read)
        for partition, offset in self._pending.values():
            target[partition] = min(target.get(partition, offset), offset)
        changed = {p: o for p, o in target.items() if self._committed.get(p) != o}
        if changed:
            await self.store.log.commit(self.config.group, topics.SAMPLES, changed)
            self._committed.update(changed)

    def reset(self) -> None:
        """Forget the pending and held samples and the records read ahead, so that
        :meth:`start` resumes from the committed offsets (as a restarted process would)."""
        self._pending.clear()
        self._unresolved.clear()
        self._queue = asyncio.Queue(maxsize=QUEUE_SIZE)

    @property
    def pending(self) -> int:
        """How many samples hold back the committed offsets."""
        return len(self._pending)

    def status(self) -> dict[str, Any]:
        """The intake's part of the trainer's status."""
        return {
            "samples_waiting_for_release": len(self._unresolved),
            "committed_offsets": {str(p): o for p, o in sorted(self._committed.items()) if o},
        }
