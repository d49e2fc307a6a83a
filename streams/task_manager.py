"""The tasks of one worker, opened when the group assigns it partitions and closed when it
takes them back (Kafka Streams calls this the TaskManager).

Rebalance protocol (the consumer runs it as its rebalance listener; each step holds
:attr:`TaskManager.lock` throughout, the lock the loop processes a poll under):

1. Revocation: wait for the batch in flight to commit, then stop every task's producer
   and drop its fetched records; its stores are kept aside.
2. Assignment: close the kept stores of partition numbers not assigned again. For every
   assigned number, start its producer (``init_transactions`` fences the previous owner
   and ends its open transaction).
3. Bring the stores up to the changelog's end (nothing can be pending on it any more),
   reading from each store's position (:mod:`streams.restorer`): a new store reads the
   whole partition; a kept one only what another owner committed meanwhile (usually
   nothing), so a rebalance that gives a worker back its partitions costs no restore.
4. Seek the inputs to the offsets the group committed, read afresh.

A store's position is sound because a task's commit succeeds only while its producer is
the partition's one unfenced writer: the changelog records below the position are the
restored ones and the task's own, already in the store. A crash loses the stores (the
data directory is emptied at each start), so a restarted worker reads everything.

Each step bumps :attr:`TaskManager.generation`: a poll that spanned one is not processed,
its partitions are sought back to where their tasks stand (it may have been fetched
before the assignment's seek), so nothing is processed twice or skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Final, Protocol

from reef.core.kernel import TopicOrder
from reef.hosts import READY_LINE
from streams.partition_buffer import InputPauses
from streams.records import TopicPartition
from streams.restorer import ChangelogReader, restore_stores
from streams.store import PartitionStore
from streams.task import Hosted, Task, TaskProducer, task_buffer

logger = logging.getLogger(__name__)

#: a store kept across a rebalance is read on from its position only if it was synced
#: this recently (see :meth:`streams.store.PartitionStore.fresh`); else it is restored anew
KEPT_STORE_MAX_AGE_S: Final = 3600.0


class CommittedOffsets(Protocol):
    """The group consumer calls the task manager makes."""

    async def committed(self, tp: TopicPartition) -> int | None: ...
    async def beginning_offsets(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]: ...
    def seek(self, tp: TopicPartition, offset: int) -> None: ...


class TaskManager:
    """Opens, restores, seeks and closes this worker's tasks (see the module doc)."""

    def __init__(
        self,
        hosted: Sequence[Hosted],
        data_dir: Path,
        *,
        consumer: CommittedOffsets,
        changelogs: ChangelogReader,
        open_producer: Callable[[int], Awaitable[TaskProducer]],
        pauses: InputPauses,
        order: TopicOrder,
        group: str,
    ) -> None:
        self._hosted = list(hosted)
        self._data_dir = data_dir
        self._consumer = consumer
        self._changelogs = changelogs
        self._open_producer = open_producer
        self._pauses = pauses
        self._order = order
        self._group = group
        #: the open tasks, by partition number
        self.tasks: dict[int, Task] = {}
        #: stores of the partitions revoked last, per number, until the next assignment
        self._kept: dict[int, dict[str, PartitionStore]] = {}
        self.lock = asyncio.Lock()
        #: bumped by every rebalance step (under the lock): a poll that spans one is re-read
        self.generation = 0
        #: set while a rebalance or a restore is under way (the watchdog waits then)
        self.rebalancing = False
        #: set while stores are restored from their changelogs (may take long: no stall)
        self.restoring = False
        self._ready = False

    async def revoked(self, partitions: set[TopicPartition]) -> None:
        """Step 1."""
        self.rebalancing = True
        async with self.lock:  # the batch in flight commits first
            self.generation += 1
            await self._close_tasks(keep_stores=True)

    async def assigned(self, partitions: set[TopicPartition]) -> None:
        """Steps 1-4: the tasks of the partition numbers in ``partitions``."""
        self.rebalancing = True
        try:
            async with self.lock:
                self.generation += 1
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
                restored = await self._restore(tasks)
                await self._seek_committed(tasks)
                self.tasks = {task.partition: task for task in tasks}
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
                    logger.info("%s (group %s)", READY_LINE, self._group)
        finally:
            self.rebalancing = False

    async def close(self) -> None:
        """Close every task and every kept store: the worker stops."""
        async with self.lock:
            await self._close_tasks()
            self._close_kept(set())

    async def _open_task(self, n: int, inputs: set[TopicPartition]) -> Task:
        """Step 2 for partition number ``n``: its producer, and its kept stores if they
        are fresh enough, else new ones."""
        producer = await self._open_producer(n)  # init_transactions: fences the previous owner
        kept = self._kept.pop(n, None)
        if kept is not None and not all(st.fresh(KEPT_STORE_MAX_AGE_S) for st in kept.values()):
            for store in kept.values():
                store.close()
            kept = None
        stores = kept or {
            h.processor.name: PartitionStore(self._data_dir / f"{h.processor.name}-{n}")
            for h in self._hosted
        }
        return Task(n, producer, stores, frozenset(inputs), task_buffer(inputs, self._order))

    async def _restore(self, tasks: Sequence[Task]) -> int:
        """Step 3: bring each task's stores up to their changelogs; how many records were
        copied."""
        targets = {
            TopicPartition(h.changelog, task.partition): task.stores[h.processor.name]
            for task in tasks
            for h in self._hosted
        }
        self.restoring = True
        try:
            return await restore_stores(self._changelogs, targets)
        finally:
            self.restoring = False

    async def _seek_committed(self, tasks: Sequence[Task]) -> None:
        """Step 4: each input from the group's committed offset (never committed: its
        first offset)."""
        never: list[tuple[Task, TopicPartition]] = []
        for task in tasks:
            for tp in task.inputs:
                offset = await self._consumer.committed(tp)
                if offset is None:
                    never.append((task, tp))
                else:
                    self._consumer.seek(tp, offset)
                    task.committed[tp] = offset
        if never:
            # not seek_to_beginning: that waits on the fetcher's reset, which retries a
            # stale leader (streams.kafka_consumer.METADATA_MAX_AGE_MS); this refreshes
            # metadata and times out
            starts = await self._consumer.beginning_offsets([tp for _, tp in never])
            for task, tp in never:
                self._consumer.seek(tp, starts[tp])
                task.committed[tp] = starts[tp]

    async def _close_tasks(self, *, keep_stores: bool = False) -> None:
        """Stop every task's producer; close its stores, or keep them for the next
        assignment (``keep_stores``: a revocation)."""
        tasks, self.tasks = list(self.tasks.values()), {}
        self._pauses.release()
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
