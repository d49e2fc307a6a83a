"""Hosting the processors on Kafka with exactly-once results: Reef's own transactional loop.

A worker is one consumer group member (group ``<prefix>reef-streams``, the range assignor,
so partition *n* of every co-partitioned input topic goes to the same member) and one
*task* per assigned partition number *n* (:mod:`streams.task`): a transactional producer
(id ``<group>-<n>``: the same id whichever worker runs it, so a new owner fences the old
one) and, per processor, the state of partition *n* (:class:`streams.store.PartitionStore`,
a copy of the changelog ``<group>-<processor>-state-changelog`` partition *n*).

:class:`StreamsHost` composes the worker's collaborators and runs the loop over them:

- :mod:`streams.kafka_consumer`: the consumers, behind typed calls and records;
- :mod:`streams.task_manager`: the rebalance protocol (tasks opened, their stores
  restored by :mod:`streams.restorer`, their inputs sought, tasks closed);
- :mod:`streams.partition_buffer`: each task's fetched records, and back-pressure;
- :mod:`streams.batch`: the batch protocol (the kernel's fold, one transaction of
  :mod:`streams.transaction`, then the stores), with what a crash at each step means;
- :mod:`streams.watchdog`: a worker that stops making progress exits (status 75).

The loop, for each poll (under the task manager's lock, so no rebalance step runs
between its steps):

1. A poll that spanned a rebalance step is not processed: its partitions are sought back
   to where their tasks stand (it may have been fetched before the assignment's seek), so
   nothing is processed twice or skipped.
2. Each record is held in its task's buffer.
3. Each task takes its held records up to a horizon: an input partition that may still
   have unfetched records (or is paused) bounds the batch by its last fetched record, so
   the records are processed in the kernel's order (:mod:`reef.core.kernel`: timestamp,
   the topic's rank, offset; the order of the embedded host and of replay), whatever
   each topic's fetch size. Inputs whose fetch position passed records that are not data
   (transaction markers, aborted batches) commit that position.
4. Inputs holding too much are paused until their records are processed.
5. The tasks' batches run concurrently; any failure ends the worker with status 75
   without committing (:func:`die`), the one path exactly-once is built for.

A graceful stop (SIGTERM) of a static member leaves the group
(:func:`streams.kafka_consumer.leave_group_on_stop`); a SIGKILLed one keeps its
partitions until its session expires or it restarts. Why this loop replaced Faust's:
``docs/architecture.md``, "The Kafka host".
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, NoReturn

from reef.catalog import processors as configured_processors
from reef.core.kernel import TopicOrder
from reef.core.state import Processor
from reef.core.topics import STREAMS_APP_ID
from reef.log.kafka import KafkaLog
from reef.log.wire_format import open_codec
from reef.settings import Settings
from streams import watchdog
from streams.batch import BatchRunner
from streams.changelog import changelog_topic
from streams.clients import KafkaOptions, WorkerClients, kafka_clients
from streams.kafka_consumer import ConsumerFailedError
from streams.partition_buffer import InputPauses
from streams.records import FetchedRecord, TopicPartition, source_of
from streams.task import Hosted, Task, hosted_processors
from streams.task_manager import TaskManager

logger = logging.getLogger(__name__)

#: exit status of a worker that stops because a transaction can no longer complete
EXIT_TRANSACTION_FAILED: Final = 75

#: most records of one task in one transaction
MAX_BATCH_RECORDS: Final = 2000
#: an input partition with this many records held (waiting for a co-partitioned input to
#: catch up, see ``_take_ready``) is paused until they are processed
MAX_HELD_RECORDS: Final = 10_000
#: how long one poll waits for records
POLL_TIMEOUT_MS: Final = 200
#: allocations between two young collections of the cyclic collector in a worker process
#: (the interpreter's default: 700), see :func:`quiet_collector`
GC_YOUNG_THRESHOLD: Final = 10_000

#: one task's batch: the records ready, and the inputs committed past non-data records
Batch = tuple[list[FetchedRecord], dict[TopicPartition, int]]


def die(reason: str, exc: BaseException | None = None) -> NoReturn:
    """Exit now, committing nothing: the open transactions are aborted by the next owner.

    A graceful stop could commit part of a batch; the stores may hold nothing wrong (they
    change only after a commit) but the process state is unknown. Exiting like a SIGKILL
    is the one path exactly-once is built for: a supervisor restarts the worker.
    """
    logger.critical("exactly-once cannot continue (%s): exiting", reason, exc_info=exc)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_TRANSACTION_FAILED)


def group_id(settings: Settings) -> str:
    return settings.kafka.topic_prefix + STREAMS_APP_ID


def changelog_topics(settings: Settings) -> list[str]:
    group = group_id(settings)
    return sorted(changelog_topic(group, p.name) for p in configured_processors(settings))


async def ensure_changelog_topics(settings: Settings) -> None:
    """Create the changelog topics before the worker joins its group, like Reef's own
    topics: replicated (up to 3, min ISR 2), compacted, co-partitioned with the inputs."""
    names = changelog_topics(settings)
    log = KafkaLog(
        settings.kafka.bootstrap,
        partitions=settings.deployment.partitions,
        client_id=f"{group_id(settings)}-setup",
        topic_configs={name: {"cleanup.policy": "compact"} for name in names},
    )
    await log.ensure_topics(names)


def kafka_options(settings: Settings) -> KafkaOptions:
    """The slice of the settings a worker's Kafka clients read."""
    return KafkaOptions(
        settings.kafka.bootstrap,
        group_id(settings),
        session_timeout_s=settings.streams.session_timeout_s,
        instance_id=settings.streams.instance_id,
        commit_timeout_s=settings.streams.stall_timeout_s or None,
    )


class StreamsHost:
    """Hosts the pure processors of :mod:`reef.core` on Kafka (see the module doc)."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        *,
        processors: Sequence[Processor] | None = None,
        on_fatal: Callable[[str, BaseException | None], NoReturn] = die,
        clients: WorkerClients | None = None,
    ) -> None:
        """``clients``: the worker's clients of Kafka (default: on the settings' brokers)."""
        self.group = group_id(settings)
        prefix = settings.kafka.topic_prefix
        chosen = processors if processors is not None else configured_processors(settings)
        self.hosted = hosted_processors(chosen, prefix, self.group)
        #: input topic -> the processors reading it
        self.readers: dict[str, list[Hosted]] = defaultdict(list)
        for hosted in self.hosted:
            for topic in hosted.inputs:
                self.readers[topic].append(hosted)
        self._fatal = on_fatal
        self._bootstrap = settings.kafka.bootstrap
        self._stall_timeout_s = settings.streams.stall_timeout_s
        if clients is None:
            clients = kafka_clients(kafka_options(settings), {h.changelog for h in self.hosted})
        self.consumer = clients.consumer
        self._changelogs = clients.changelogs
        self._pauses = InputPauses(self.consumer)
        self.tasks = TaskManager(
            self.hosted,
            data_dir,
            consumer=self.consumer,
            changelogs=self._changelogs,
            open_producer=clients.open_producer,
            pauses=self._pauses,
            order=TopicOrder(prefix),
            group=self.group,
        )
        self.batches = BatchRunner(
            self.hosted, open_codec(settings), topic_prefix=prefix, fatal=on_fatal
        )
        self._stopping = asyncio.Event()
        #: a deliberate wedge (SIGUSR2, for the watchdog's own test): the loop stops polling
        self.wedged = False

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until :meth:`stop`; any failure of the exactly-once path ends the process."""
        await self._changelogs.start()
        await self.consumer.start()
        self.consumer.subscribe(self.readers, self.tasks, self._fatal)
        watch = None
        if self._stall_timeout_s:
            watch = asyncio.create_task(
                watchdog.watch(self, self._bootstrap, self._stall_timeout_s, self._fatal),
                name="reef-watchdog",
            )
        logger.info("reef streams: group %s, processors %s", self.group, self.names())
        try:
            await self._loop()
        finally:
            if watch is not None:
                watch.cancel()
            await self.tasks.close()
            await self.consumer.stop(leave_group=self._stopping.is_set())
            await self._changelogs.stop()

    def stop(self) -> None:
        self._stopping.set()

    def names(self) -> list[str]:
        return [h.processor.name for h in self.hosted]

    def input_assignment(self) -> set[TopicPartition]:
        """The input partitions this worker holds now."""
        return self.consumer.assignment()

    @property
    def rebalancing(self) -> bool:
        """Whether a rebalance or a restore is under way (the watchdog waits then)."""
        return self.tasks.rebalancing

    @property
    def restoring(self) -> bool:
        """Whether stores are being restored (may take long: no stall)."""
        return self.tasks.restoring

    # -- the loop -------------------------------------------------------------------

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            if self.wedged:
                await self._stopping.wait()
                return
            generation = self.tasks.generation
            try:
                polled = await self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            except ConsumerFailedError as exc:
                # e.g. the group coordination aborted by a broker killed mid-rebalance: a
                # restart rejoins cleanly
                self._fatal("the consumer failed", exc)
            async with self.tasks.lock:
                if generation != self.tasks.generation:
                    # the poll spanned a rebalance: it may predate the assignment's seek
                    self._seek_back(polled)
                    continue
                batches = await self._take_batches(polled)
                if batches:
                    await self._run_batches(batches)

    def _seek_back(self, polled: Mapping[TopicPartition, list[FetchedRecord]]) -> None:
        """Read again what a poll spanning a rebalance returned, from where each task is."""
        for tp in polled:
            task = self.tasks.tasks.get(tp.partition)
            if task is not None and tp in task.inputs:
                self.consumer.seek(tp, task.buffer.resume_offset(tp, task.committed[tp]))

    async def _take_batches(
        self, polled: Mapping[TopicPartition, list[FetchedRecord]]
    ) -> dict[int, Batch]:
        """Steps 2-4 of the loop: hold the poll's records, take each task's batch, pause
        the inputs that hold too much."""
        tasks = self.tasks.tasks
        for tp, records in polled.items():
            task = tasks.get(tp.partition)
            if task is not None and tp in task.inputs:
                task.buffer.hold(tp, records)
        batches = {}
        for task in tasks.values():
            ready = await self._take_ready(task)
            skipped = await self._past_markers(task, ready)
            if ready or skipped:
                batches[task.partition] = (ready, skipped)
        self._pauses.hold_back(
            {tp for task in tasks.values() for tp in task.buffer.full(MAX_HELD_RECORDS)}
        )
        return batches

    async def _run_batches(self, batches: Mapping[int, Batch]) -> None:
        """Step 5: every task's batch (:class:`streams.batch.BatchRunner`), concurrently."""
        tasks = self.tasks.tasks
        try:
            await asyncio.gather(
                *(self.batches.run(tasks[n], *batch) for n, batch in batches.items())
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fatal("a transaction failed", exc)

    async def _take_ready(self, task: Task) -> list[FetchedRecord]:
        """The task's held records that can be processed now, in the kernel's order: a
        co-partitioned input that may still have unfetched records (or is paused) bounds
        the batch by its last fetched record, nothing fetched bounding everything
        (:meth:`streams.partition_buffer.PartitionBuffer.take`)."""
        open_inputs = {
            tp for tp in task.inputs if tp in self._pauses or await self._may_have_more(tp)
        }
        return task.buffer.take(open_inputs, MAX_BATCH_RECORDS)  # the rest waits, in order

    async def _may_have_more(self, tp: TopicPartition) -> bool:
        stable = self.consumer.last_stable_offset(tp)
        return stable is None or await self.consumer.position(tp) < stable

    async def _past_markers(
        self, task: Task, ready: Sequence[FetchedRecord]
    ) -> dict[TopicPartition, int]:
        """Input partitions whose fetch position passed records that are not data: the
        commit markers of transactions (an input another processor of this host writes,
        as the join writes the samples the rollout controller reads) and aborted batches.
        With nothing of them held, the offsets to commit are those positions: committing
        only past the last data record would leave the marker forever "waiting" (lag that
        never drains, and a stall the watchdog ends the worker for)."""
        done = {source_of(r): r.offset + 1 for r in ready}
        past = {}
        for tp in task.inputs:
            if task.buffer.holds(tp) or tp in self._pauses:
                continue
            position = await self.consumer.position(tp)
            if position > done.get(tp, task.committed.get(tp, 0)):
                past[tp] = position
        return past


def install_signal_handlers(host: StreamsHost) -> None:
    """SIGTERM/SIGINT: stop after the batch in flight; SIGUSR2: wedge the loop on purpose
    (it stops polling and committing while the process stays alive: the watchdog's test)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, host.stop)

    def wedge() -> None:
        logger.warning("SIGUSR2: the loop stops processing (a deliberate wedge)")
        host.wedged = True

    loop.add_signal_handler(signal.SIGUSR2, wedge)


async def serve(settings: Settings, data_dir: Path) -> None:
    """``reef streams`` on Kafka: changelog topics first, then the host until a signal."""
    await ensure_changelog_topics(settings)
    host = StreamsHost(settings, data_dir)
    install_signal_handlers(host)
    quiet_collector()
    await host.run()


def quiet_collector() -> None:
    """Make the cyclic collector rare in the worker process: what it imported is frozen
    out of every scan, and a young collection waits for :data:`GC_YOUNG_THRESHOLD`
    allocations. A catch-up holds thousands of fetched records and decoded events at a
    time, none of them cyclic, so with the defaults (700) collections would run every few
    hundred allocations and full ones would scan all of them again
    (``bench/join_throughput.py`` shows the cost). Reference counting still frees
    everything that is not in a cycle at once."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)


def data_dir_base(settings: Settings) -> Path:
    """Where this deployment's workers keep their data directories (see streams.datadir)."""
    return settings.deployment.state_dir / "streams" / group_id(settings)
