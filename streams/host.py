"""Hosting the processors on Kafka with exactly-once results: Reef's own transactional loop.

A worker is one consumer group member (group ``<prefix>reef-streams``, the range assignor,
so partition *n* of every co-partitioned input topic goes to the same member) and one
*task* per assigned partition number *n*. A task owns a transactional producer (id
``<group>-<n>``: the same id whichever worker runs it, so a new owner fences the old one)
and, per processor, the state of partition *n* (:class:`streams.store.PartitionStore`, a
copy of the changelog ``<group>-<processor>-state-changelog`` partition *n*).

Protocol of a batch (per task, for the records one poll returned for its partitions):

1. Take the task's fetched records up to a horizon: an input partition that may still
   have unfetched records bounds the batch by its last fetched record, so the records are
   processed in the kernel's order (:mod:`reef.core.kernel`: timestamp, the topic's rank,
   offset; the order of the embedded host and of replay), whatever each topic's fetch
   size (an input holding too much waits, paused). Fold each processor's records
   (:func:`reef.core.kernel.fold`), against a write buffer over the committed store, in
   chunks of a few hundred records with a yield to the event loop
   between them (the keys a chunk's steps will read, when a processor names them, are
   first read from the store in one ``multi_get``). Nothing leaves the process yet.
2. ``begin_transaction``; send the outputs (partition *n* of each output's topic: the
   topic of its event type), one changelog record per changed key (the last value:
   writes coalesce), and the next input offsets (``send_offsets_to_transaction``);
   ``commit_transaction``.
3. Only after the commit, write the changes into the store.

A crash (or any failed send or commit: the worker then exits with status 75 without
committing, :func:`die`) before step 2's commit leaves nothing visible to read_committed
readers: the next owner's ``init_transactions`` aborts the open transaction, restores
the store from the committed changelog and starts at the committed offsets, so it
computes the same outputs again. A crash after the commit loses nothing: the store is
only a copy. Output ids are deterministic and steps remember what they applied, so even
a redelivery past those guarantees is a no-op.

Rebalance protocol (the consumer's listener holds the loop's lock throughout):

1. Revocation: wait for the batch in flight to commit, then stop every task's producer
   and drop its fetched records; its stores are kept aside.
2. Assignment: close the kept stores of partition numbers not assigned again. For every
   assigned number, start its producer (``init_transactions`` fences the previous owner
   and ends its open transaction).
3. Bring the stores up to the changelog's end (nothing can be pending on it any more),
   reading from each store's position: a new store reads the whole partition; a kept
   one only what another owner committed meanwhile (usually nothing), so a rebalance
   that gives a worker back its partitions costs no restore.
4. Seek the inputs to the offsets the group committed, read afresh.

A store's position is sound because a task's commit succeeds only while its producer is
the partition's one unfenced writer: the changelog records below the position are the
restored ones and the task's own, already in the store. A crash loses the stores (the
data directory is emptied at each start), so a restarted worker reads everything.

A graceful stop (SIGTERM) of a static member leaves the group (:func:`leave_group_on_stop`);
a SIGKILLed one keeps its partitions until its session expires or it restarts.

Each rebalance step bumps a generation: a poll that spanned one is not processed, its
partitions are sought back to where their tasks stand (it may have been fetched before
the assignment's seek), so nothing is processed twice or skipped. Why this loop replaced
Faust's: ``docs/architecture.md``, "The Kafka host".
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError

from reef.catalog import processors as configured_processors
from reef.core.collector import collector_paused
from reef.core.errors import CodecError, CorruptRecordError
from reef.core.events import Event
from reef.core.kernel import OrderKey, TopicOrder, fold
from reef.core.state import Processor, ReadHinting, WriteBuffer
from reef.core.topics import STREAMS_APP_ID, topic_for
from reef.hosts import READY_LINE
from reef.log.kafka import KafkaLog
from reef.log.wire_format import open_codec
from reef.settings import Settings
from streams import watchdog
from streams.changelog import changelog_topic
from streams.partition_buffer import PartitionBuffer
from streams.restorer import restore_stores
from streams.store import Change, PartitionStore
from streams.transaction import CommitStalledError, Row, commit_batch

logger = logging.getLogger(__name__)

#: exit status of a worker that stops because a transaction can no longer complete
EXIT_TRANSACTION_FAILED: Final = 75

#: how old the clients' cluster metadata may get (aiokafka's default: 5 minutes). aiokafka
#: resets a partition's position (ListOffsets) against the leader its metadata names and,
#: when that broker answers NotLeaderForPartition, retries without refreshing it: after a
#: broker of three was killed, a worker's assignment waited on that loop until the
#: watchdog ended it (60 s). Fresh metadata bounds that loop to this long.
METADATA_MAX_AGE_MS: Final = 5_000

#: most records one poll takes
MAX_POLL_RECORDS: Final = 5000
#: most records of one task in one transaction
MAX_BATCH_RECORDS: Final = 2000
#: an input partition with this many records held (waiting for a co-partitioned input to
#: catch up, see ``_take_ready``) is paused until they are processed
MAX_HELD_RECORDS: Final = 10_000
#: the step yields to the event loop (heartbeats, the watchdog) this often
YIELD_EVERY: Final = 256
#: allocations between two young collections of the cyclic collector in a worker process
#: (the interpreter's default: 700), see :func:`quiet_collector`
GC_YOUNG_THRESHOLD: Final = 10_000
#: a store kept across a rebalance is read on from its position only if it was synced
#: this recently (see :meth:`streams.store.PartitionStore.fresh`); else it is restored anew
KEPT_STORE_MAX_AGE_S: Final = 3600.0


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
    return settings.kafka_topic_prefix + STREAMS_APP_ID


def changelog_topics(settings: Settings) -> list[str]:
    group = group_id(settings)
    return sorted(changelog_topic(group, p.name) for p in configured_processors(settings))


async def ensure_changelog_topics(settings: Settings) -> None:
    """Create the changelog topics before the worker joins its group, like Reef's own
    topics: replicated (up to 3, min ISR 2), compacted, co-partitioned with the inputs."""
    names = changelog_topics(settings)
    log = KafkaLog(
        settings.kafka_bootstrap,
        partitions=settings.partitions,
        client_id=f"{group_id(settings)}-setup",
        topic_configs={name: {"cleanup.policy": "compact"} for name in names},
    )
    await log.ensure_topics(names)


@dataclass(frozen=True, slots=True)
class Hosted:
    """A processor with its full (prefixed) topic names."""

    processor: Processor
    inputs: tuple[str, ...]
    changelog: str


@dataclass(slots=True)
class Task:
    """Partition number ``n`` of every input topic: its producer and its stores."""

    partition: int
    producer: AIOKafkaProducer
    stores: dict[str, PartitionStore]
    inputs: frozenset[TopicPartition]
    #: records fetched and not processed yet, per input partition, in offset order
    buffer: PartitionBuffer[TopicPartition, Any]
    #: input offsets this task committed last (next to read)
    committed: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(slots=True)
class Pending:
    """One batch of a task, computed and not yet sent (protocol step 1)."""

    outputs: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]]
    changes: dict[str, list[Change]]
    offsets: dict[TopicPartition, int]


class StreamsHost:
    """Hosts the pure processors of :mod:`reef.core` on Kafka (see the module doc)."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        *,
        processors: Sequence[Processor] | None = None,
        on_fatal: Callable[[str, BaseException | None], NoReturn] = die,
    ) -> None:
        self.settings = settings
        self.group = group_id(settings)
        prefix = settings.kafka_topic_prefix
        self.hosted = [
            Hosted(
                p,
                tuple(prefix + t for t in p.inputs),
                changelog_topic(self.group, p.name),
            )
            for p in (processors if processors is not None else configured_processors(settings))
        ]
        #: the processors that name the keys a step reads: a batch fetches them at once
        self.hinted: list[tuple[Hosted, Callable[[Event], Iterable[str]]]] = [
            (h, h.processor.reads) for h in self.hosted if isinstance(h.processor, ReadHinting)
        ]
        self.readers: dict[str, list[Hosted]] = defaultdict(list)
        for hosted in self.hosted:
            for topic in hosted.inputs:
                self.readers[topic].append(hosted)
        #: the kernel's record order, for this deployment's prefixed topic names
        self._topic_order = TopicOrder(settings.kafka_topic_prefix)
        #: output event type -> its (prefixed) topic
        self._output_topics: dict[str, str] = {}
        self.data_dir = data_dir
        self.codec = open_codec(settings)
        self._fatal = on_fatal
        self._tasks: dict[int, Task] = {}
        #: stores of the partitions revoked last, per number, until the next assignment
        self._kept: dict[int, dict[str, PartitionStore]] = {}
        self._lock = asyncio.Lock()
        self._consumer: AIOKafkaConsumer | None = None
        self._restorer: AIOKafkaConsumer | None = None
        self._stopping = asyncio.Event()
        #: set while a rebalance or a restore is under way (the watchdog waits then)
        self.rebalancing = False
        #: set while stores are restored from their changelogs (may take long: no stall)
        self.restoring = False
        #: a deliberate wedge (SIGUSR2, for the watchdog's own test): the loop stops polling
        self.wedged = False
        self._ready = False
        #: bumped by every rebalance step (under the lock): a poll that spans one is re-read
        self._generation = 0
        self._paused: set[TopicPartition] = set()

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until :meth:`stop`; any failure of the exactly-once path ends the process."""
        s = self.settings
        self._restorer = AIOKafkaConsumer(
            bootstrap_servers=s.kafka_bootstrap,
            client_id=f"{self.group}-restore",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        options: dict[str, Any] = {}
        if s.streams_instance_id:
            # static membership: a restarted worker gets its partitions back without waiting
            # for its killed predecessor's session to expire (and without a rebalance)
            options["group_instance_id"] = s.streams_instance_id
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.kafka_bootstrap,
            group_id=self.group,
            client_id=f"{self.group}-{os.getpid()}",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=int(s.streams_session_timeout_s * 1000),
            heartbeat_interval_ms=int(max(1.0, s.streams_session_timeout_s / 3) * 1000),
            max_poll_records=MAX_POLL_RECORDS,
            fetch_max_wait_ms=100,
            **options,
        )
        await self._restorer.start()
        await self._consumer.start()
        self._consumer.subscribe(sorted(self.readers), listener=_Listener(self))
        watch = None
        if s.streams_stall_timeout_s:
            watch = asyncio.create_task(
                watchdog.watch(self, s.kafka_bootstrap, s.streams_stall_timeout_s, self._fatal),
                name="reef-watchdog",
            )
        logger.info("reef streams: group %s, processors %s", self.group, self.names())
        try:
            await self._loop()
        finally:
            if watch is not None:
                watch.cancel()
            async with self._lock:
                await self._close_tasks()
                self._close_kept(set())
            if self._stopping.is_set():
                leave_group_on_stop(self._consumer)
            await self._consumer.stop()
            await self._restorer.stop()

    def stop(self) -> None:
        self._stopping.set()

    def names(self) -> list[str]:
        return [h.processor.name for h in self.hosted]

    def input_assignment(self) -> set[TopicPartition]:
        """The input partitions this worker holds now."""
        return set() if self._consumer is None else set(self._consumer.assignment())

    # -- the loop -------------------------------------------------------------------

    async def _loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stopping.is_set():
            if self.wedged:
                await self._stopping.wait()
                return
            generation = self._generation
            try:
                polled = await consumer.getmany(timeout_ms=200)
            except KafkaError as exc:
                # e.g. the group coordination aborted by a broker killed mid-rebalance
                # (UnknownError from the assignment wait): a restart rejoins cleanly
                self._fatal("the consumer failed", exc)
            async with self._lock:
                if generation != self._generation:
                    # the poll spanned a rebalance: it may predate the assignment's seek
                    self._seek_back(polled)
                    continue
                for tp, messages in polled.items():
                    task = self._tasks.get(tp.partition)
                    if task is not None and tp in task.inputs:
                        task.buffer.hold(tp, messages)
                batches = {}
                for task in self._tasks.values():
                    ready = await self._take_ready(task)
                    skipped = await self._past_markers(task, ready)
                    if ready or skipped:
                        batches[task.partition] = (ready, skipped)
                self._apply_backpressure()
                if not batches:
                    continue
                try:
                    await asyncio.gather(
                        *(self._run_batch(self._tasks[n], *batch) for n, batch in batches.items())
                    )
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._fatal("a transaction failed", exc)

    def _seek_back(self, polled: dict[TopicPartition, list[Any]]) -> None:
        """Read again what a poll spanning a rebalance returned, from where each task is."""
        consumer = self._consumer
        assert consumer is not None
        for tp in polled:
            task = self._tasks.get(tp.partition)
            if task is not None and tp in task.inputs:
                consumer.seek(tp, task.buffer.resume_offset(tp, task.committed[tp]))

    def _order(self, message: Any) -> OrderKey:
        """Where a record sorts among its partition number's inputs (the kernel's order)."""
        return self._topic_order.key(message.topic, message.timestamp, message.offset)

    async def _take_ready(self, task: Task) -> list[Any]:
        """The task's held records that can be processed now, in the kernel's order: a
        co-partitioned input that may still have unfetched records (or is paused) bounds
        the batch by its last fetched record, nothing fetched bounding everything
        (:meth:`streams.partition_buffer.PartitionBuffer.take`)."""
        consumer = self._consumer
        assert consumer is not None
        open_inputs = {
            tp for tp in task.inputs if tp in self._paused or await self._may_have_more(tp)
        }
        return task.buffer.take(open_inputs, MAX_BATCH_RECORDS)  # the rest waits, in order

    async def _may_have_more(self, tp: TopicPartition) -> bool:
        consumer = self._consumer
        assert consumer is not None
        stable = consumer.last_stable_offset(tp)
        return stable is None or await consumer.position(tp) < stable

    def _apply_backpressure(self) -> None:
        """Pause the inputs that hold too much while another input catches up."""
        consumer = self._consumer
        assert consumer is not None
        full = {tp for task in self._tasks.values() for tp in task.buffer.full(MAX_HELD_RECORDS)}
        if full - self._paused:
            consumer.pause(*(full - self._paused))
        if self._paused - full:
            consumer.resume(*(self._paused - full))
        self._paused = full

    async def _past_markers(self, task: Task, ready: list[Any]) -> dict[TopicPartition, int]:
        """Input partitions whose fetch position passed records that are not data: the
        commit markers of transactions (an input another processor of this host writes,
        as the join writes the samples the rollout controller reads) and aborted batches.
        With nothing of them held, the offsets to commit are those positions: committing
        only past the last data record would leave the marker forever "waiting" (lag that
        never drains, and a stall the watchdog ends the worker for)."""
        consumer = self._consumer
        assert consumer is not None
        done = {TopicPartition(m.topic, m.partition): m.offset + 1 for m in ready}
        past = {}
        for tp in task.inputs:
            if task.buffer.holds(tp) or tp in self._paused:
                continue
            position = await consumer.position(tp)
            if position > done.get(tp, task.committed.get(tp, 0)):
                past[tp] = position
        return past

    async def _run_batch(
        self, task: Task, ready: list[Any], skipped: dict[TopicPartition, int]
    ) -> None:
        pending = await self._compute(task, ready)
        pending.offsets.update(skipped)  # a batch of markers only commits its offsets
        positions = await self._commit(task, pending)
        for h in self.hosted:
            name = h.processor.name
            task.stores[name].commit(pending.changes[name], positions.get(h.changelog))
        task.committed.update(pending.offsets)

    async def _compute(self, task: Task, ready: list[Any]) -> Pending:
        """Protocol step 1: the batch's outputs, state changes and next offsets."""
        buffers = {name: WriteBuffer(store) for name, store in task.stores.items()}
        outputs: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]] = []
        last: dict[tuple[str, int], int] = {}
        for start in range(0, len(ready), YIELD_EVERY):
            if start:
                await asyncio.sleep(0)  # heartbeats and the watchdog run between chunks
            chunk = ready[start : start + YIELD_EVERY]
            for message in chunk:
                last[message.topic, message.partition] = message.offset
            with collector_paused():  # no await inside: a chunk allocates many young objects
                self._step_chunk(task, buffers, chunk, outputs)
        changes = {
            name: [Change.of(key, value) for key, value in buffer.changes()]
            for name, buffer in buffers.items()
        }
        offsets = {TopicPartition(t, p): offset + 1 for (t, p), offset in last.items()}
        return Pending(outputs, changes, offsets)

    def _step_chunk(
        self,
        task: Task,
        buffers: dict[str, WriteBuffer],
        chunk: list[Any],
        outputs: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]],
    ) -> None:
        """Decode a chunk, fetch the keys its steps will read (one ``multi_get`` per
        store: a read hint only, the buffers still answer first), run its steps in order."""
        decoded = [(m.topic, event) for m in chunk if (event := self._decode(m)) is not None]
        for hosted, hint in self.hinted:
            wanted = (event for topic, event in decoded if topic in hosted.inputs)
            task.stores[hosted.processor.name].prefetch(k for e in wanted for k in hint(e))
        for hosted in self.hosted:
            events = [event for topic, event in decoded if topic in hosted.inputs]
            for output in fold(hosted.processor, buffers[hosted.processor.name], events):
                value, headers = self.codec.encode(output)
                topic = self._output_topics.get(output.type_name()) or self._output(output)
                outputs.append((topic, output.scenario.encode(), value, headers))

    def _output(self, event: Event) -> str:
        """The topic an output goes to: its event type's (a processor may write more than
        one type, as the embedded host allows: the rollout controller's decisions and
        promote proposals), under the deployment's prefix."""
        name = event.type_name()
        topic = self._output_topics[name] = self.settings.kafka_topic_prefix + topic_for(name)
        return topic

    def _decode(self, message: Any) -> Event | None:
        try:
            if message.value is None:
                raise CorruptRecordError("a tombstone on an event topic")
            return self.codec.decode(message.value)
        except CodecError:
            logger.exception(
                "skipping undecodable record %s[%d]@%d",
                message.topic,
                message.partition,
                message.offset,
            )
            return None

    async def _commit(self, task: Task, pending: Pending) -> dict[str, int]:
        """Protocol step 2 (:func:`streams.transaction.commit_batch`): outputs, changelog
        records and offsets in one transaction; per changelog topic written, the offset
        after the last record written."""
        rows: dict[str, list[Row]] = defaultdict(list)
        for topic, key, value, headers in pending.outputs:
            rows[topic].append((key, value, headers))
        for h in self.hosted:
            rows[h.changelog] += [
                (c.raw_key, c.raw_value, ()) for c in pending.changes[h.processor.name]
            ]
        try:
            return await commit_batch(
                task.producer,
                task.partition,
                rows,
                pending.offsets,
                self.group,
                timeout_s=self.settings.streams_stall_timeout_s or None,
                changelogs={h.changelog for h in self.hosted},
            )
        except CommitStalledError as exc:
            self._fatal(str(exc), None)

    # -- rebalances -----------------------------------------------------------------

    async def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        self.rebalancing = True
        async with self._lock:  # the batch in flight commits first
            self._generation += 1
            await self._close_tasks(keep_stores=True)

    async def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        self.rebalancing = True
        try:
            async with self._lock:
                self._generation += 1
                await self._close_tasks(keep_stores=True)
                numbers: dict[int, set[TopicPartition]] = defaultdict(set)
                for tp in partitions:
                    numbers[tp.partition].add(tp)
                self._close_kept(set(numbers))
                kept = sorted(self._kept)
                started = time.monotonic()
                tasks = await asyncio.gather(
                    *(self._open_task(n, tps) for n, tps in sorted(numbers.items()))
                )
                self.restoring = True
                try:
                    restored = await self._restore(tasks)
                finally:
                    self.restoring = False
                await self._seek_committed(tasks)
                self._tasks = {task.partition: task for task in tasks}
                logger.info(
                    "assigned partitions %s (stores kept: %s): restored %d changelog "
                    "records, ready in %.2f s",
                    sorted(numbers),
                    kept,
                    restored,
                    time.monotonic() - started,
                )
                if not self._ready:
                    self._ready = True
                    logger.info("%s (group %s)", READY_LINE, self.group)
        finally:
            self.rebalancing = False

    async def _open_task(self, n: int, inputs: set[TopicPartition]) -> Task:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            client_id=f"{self.group}-{n}",
            transactional_id=f"{self.group}-{n}",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            max_batch_size=1024 * 1024,
        )
        await producer.start()  # init_transactions: fences the previous owner
        kept = self._kept.pop(n, None)
        if kept is not None and not all(st.fresh(KEPT_STORE_MAX_AGE_S) for st in kept.values()):
            for store in kept.values():
                store.close()
            kept = None
        stores = kept or {
            h.processor.name: PartitionStore(self.data_dir / f"{h.processor.name}-{n}")
            for h in self.hosted
        }
        buffer = PartitionBuffer(inputs, _input_of, self._order)
        return Task(n, producer, stores, frozenset(inputs), buffer)

    async def _restore(self, tasks: Sequence[Task]) -> int:
        """Bring each task's stores up to their changelogs (:mod:`streams.restorer`); how
        many records were copied."""
        restorer = self._restorer
        assert restorer is not None
        targets = {
            TopicPartition(h.changelog, task.partition): task.stores[h.processor.name]
            for task in tasks
            for h in self.hosted
        }
        return await restore_stores(restorer, targets)

    async def _seek_committed(self, tasks: Sequence[Task]) -> None:
        consumer = self._consumer
        assert consumer is not None
        never: list[tuple[Task, TopicPartition]] = []
        for task in tasks:
            for tp in task.inputs:
                offset = await consumer.committed(tp)
                if offset is None:
                    never.append((task, tp))
                else:
                    consumer.seek(tp, offset)
                    task.committed[tp] = int(offset)
        if never:
            # not seek_to_beginning: that waits on the fetcher's reset, which retries a
            # stale leader (see METADATA_MAX_AGE_MS); this refreshes metadata and times out
            starts = await consumer.beginning_offsets([tp for _, tp in never])
            for task, tp in never:
                consumer.seek(tp, starts[tp])
                task.committed[tp] = int(starts[tp])

    async def _close_tasks(self, *, keep_stores: bool = False) -> None:
        """Stop every task's producer; close its stores, or keep them for the next
        assignment (``keep_stores``: a revocation)."""
        tasks, self._tasks = list(self._tasks.values()), {}
        if self._paused and self._consumer is not None:
            self._consumer.resume(*self._paused)
        self._paused = set()
        stopped = await asyncio.gather(
            *(task.producer.stop() for task in tasks), return_exceptions=True
        )
        for failure in stopped:
            if isinstance(failure, BaseException):  # a fenced producer: nothing to keep
                logger.warning("closing a task's producer failed: %r", failure)
        for task in tasks:
            if keep_stores:
                self._kept[task.partition] = task.stores
            else:
                for store in task.stores.values():
                    store.close()

    def _close_kept(self, assigned: set[int]) -> None:
        """Close the kept stores of partition numbers not in ``assigned``."""
        for n in sorted(set(self._kept) - assigned):
            for store in self._kept.pop(n).values():
                store.close()


def _input_of(message: Any) -> TopicPartition:
    return TopicPartition(message.topic, message.partition)


def leave_group_on_stop(consumer: AIOKafkaConsumer) -> None:
    """Make the consumer's close send LeaveGroup, as a static member too.

    aiokafka never sends LeaveGroup for a static member (``group_instance_id``, KIP-345:
    a member restarted under the same id should get its partitions back without a
    rebalance), so a worker stopped on purpose held its partitions, idle, until its
    session expired (``streams_session_timeout_s``: 10 s of no progress on them in the
    chaos bench). A graceful stop is a departure: clearing the instance id on the
    coordinator, just before ``stop()``, makes its close leave by member id, which the
    broker accepts for a static member and answers with an immediate rebalance (about
    1 s here, against the session timeout). A SIGKILLed worker sends nothing: it keeps
    the static behaviour, its partitions waiting for its restart.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None:
        coordinator._group_instance_id = None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Runs the host's rebalance steps; a failure in them ends the worker (aiokafka
    would only log it, and the worker would go on without its partitions' tasks)."""

    def __init__(self, host: StreamsHost) -> None:
        self._host = host

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._guarded(self._host.revoked(revoked), "revoking partitions")

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._guarded(self._host.assigned(assigned), "taking up partitions")

    async def _guarded(self, step: Any, what: str) -> None:
        try:
            await step
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._host._fatal(f"{what} failed", exc)


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
    return settings.state_dir / "streams" / group_id(settings)
