"""One task's batch: the records one poll made ready, processed in one transaction.

Protocol of a batch (per task, for the records the loop took from its buffer up to the
kernel's horizon, :mod:`streams.host`):

1. Fold each processor's records (:func:`reef.core.kernel.fold`) in the kernel's order,
   against a write buffer over the committed store, in chunks of :data:`YIELD_EVERY`
   records with a yield to the event loop between them (the keys a chunk's steps will
   read, when a processor names them, are first read from the store in one
   ``multi_get``). Nothing leaves the process yet.
2. One transaction (:mod:`streams.transaction`): the outputs (partition *n* of each
   output's topic: the topic of its event type), one changelog record per changed key
   (the last value: writes coalesce), and the next input offsets.
3. Only after the commit, write the changes into the store.

A crash (or any failed send or commit: the worker then exits with status 75 without
committing) before step 2's commit leaves nothing visible to read_committed readers: the
next owner's ``init_transactions`` aborts the open transaction, restores the store from
the committed changelog and starts at the committed offsets, so it computes the same
outputs again. A crash after the commit loses nothing: the store is only a copy. Output
ids are deterministic and steps remember what they applied, so even a redelivery past
those guarantees is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

from reef.codec import EventCodec
from reef.core.collector import collector_paused
from reef.core.errors import CodecError, CorruptRecordError
from reef.core.events import Event
from reef.core.kernel import fold
from reef.core.state import ReadHinting, WriteBuffer
from reef.core.topics import topic_for
from streams.records import FetchedRecord, Row, TopicPartition
from streams.store import Change, PartitionStore
from streams.task import Hosted, Task
from streams.transaction import CommitStalledError

logger = logging.getLogger(__name__)

#: step 1 yields to the event loop (heartbeats, the watchdog) this often
YIELD_EVERY: Final = 256

#: an output of a step, encoded: (topic, key, value, headers)
Output = tuple[str, bytes, bytes, list[tuple[str, bytes]]]


@dataclass(slots=True)
class Pending:
    """One batch of a task, computed and not yet sent (protocol step 1)."""

    outputs: list[Output]
    changes: dict[str, list[Change]]
    offsets: dict[TopicPartition, int]


class BatchRunner:
    """Runs the batch protocol for the tasks of one worker (see the module doc)."""

    def __init__(
        self,
        hosted: Sequence[Hosted],
        codec: EventCodec,
        *,
        topic_prefix: str,
        fatal: Callable[[str, BaseException | None], NoReturn],
    ) -> None:
        self._hosted = list(hosted)
        #: the processors that name the keys a step reads: a batch fetches them at once
        self._hinted: list[tuple[Hosted, Callable[[Event], Iterable[str]]]] = [
            (h, h.processor.reads) for h in self._hosted if isinstance(h.processor, ReadHinting)
        ]
        self._codec = codec
        self._topic_prefix = topic_prefix
        self._fatal = fatal
        #: output event type -> its (prefixed) topic
        self._output_topics: dict[str, str] = {}

    async def run(
        self, task: Task, ready: Sequence[FetchedRecord], skipped: Mapping[TopicPartition, int]
    ) -> None:
        """Steps 1-3 for ``ready``; ``skipped``: inputs whose fetch position passed records
        that are not data, committed at those positions (a batch of them only commits)."""
        pending = await self.compute(task.stores, ready)
        pending.offsets.update(skipped)
        positions = await self._commit(task, pending)
        for h in self._hosted:
            name = h.processor.name
            task.stores[name].commit(pending.changes[name], positions.get(h.changelog))
        task.committed.update(pending.offsets)

    async def compute(
        self, stores: Mapping[str, PartitionStore], ready: Sequence[FetchedRecord]
    ) -> Pending:
        """Protocol step 1: the batch's outputs, state changes and next offsets."""
        buffers = {name: WriteBuffer(store) for name, store in stores.items()}
        outputs: list[Output] = []
        last: dict[tuple[str, int], int] = {}
        for start in range(0, len(ready), YIELD_EVERY):
            if start:
                await asyncio.sleep(0)  # heartbeats and the watchdog run between chunks
            chunk = ready[start : start + YIELD_EVERY]
            for record in chunk:
                last[record.topic, record.partition] = record.offset
            with collector_paused():  # no await inside: a chunk allocates many young objects
                self._step_chunk(stores, buffers, chunk, outputs)
        changes = {
            name: [Change.of(key, value) for key, value in buffer.changes()]
            for name, buffer in buffers.items()
        }
        offsets = {TopicPartition(t, p): offset + 1 for (t, p), offset in last.items()}
        return Pending(outputs, changes, offsets)

    def _step_chunk(
        self,
        stores: Mapping[str, PartitionStore],
        buffers: dict[str, WriteBuffer],
        chunk: Sequence[FetchedRecord],
        outputs: list[Output],
    ) -> None:
        """Decode a chunk, fetch the keys its steps will read (one ``multi_get`` per
        store: a read hint only, the buffers still answer first), run its steps in order."""
        decoded = [(r.topic, event) for r in chunk if (event := self._decode(r)) is not None]
        for hosted, hint in self._hinted:
            wanted = (event for topic, event in decoded if topic in hosted.inputs)
            stores[hosted.processor.name].prefetch(k for e in wanted for k in hint(e))
        for hosted in self._hosted:
            events = [event for topic, event in decoded if topic in hosted.inputs]
            for output in fold(hosted.processor, buffers[hosted.processor.name], events):
                value, headers = self._codec.encode(output)
                topic = self._output_topics.get(output.type_name()) or self._output_topic(output)
                outputs.append((topic, output.scenario.encode(), value, headers))

    def _output_topic(self, event: Event) -> str:
        """The topic an output goes to: its event type's (a processor may write more than
        one type, as the embedded host allows: the rollout controller's decisions and
        promote proposals), under the deployment's prefix."""
        name = event.type_name()
        topic = self._output_topics[name] = self._topic_prefix + topic_for(name)
        return topic

    def _decode(self, record: FetchedRecord) -> Event | None:
        try:
            if record.value is None:
                raise CorruptRecordError("a tombstone on an event topic")
            return self._codec.decode(record.value)
        except CodecError:
            logger.exception(
                "skipping undecodable record %s[%d]@%d",
                record.topic,
                record.partition,
                record.offset,
            )
            return None

    async def _commit(self, task: Task, pending: Pending) -> dict[str, int]:
        """Protocol step 2 (:mod:`streams.transaction`): outputs, changelog records and
        offsets in one transaction; per changelog topic written, the offset after the last
        record written."""
        rows: dict[str, list[Row]] = defaultdict(list)
        for topic, key, value, headers in pending.outputs:
            rows[topic].append((key, value, headers))
        for h in self._hosted:
            rows[h.changelog] += [
                (c.raw_key, c.raw_value, ()) for c in pending.changes[h.processor.name]
            ]
        try:
            return await task.producer.commit(rows, pending.offsets)
        except CommitStalledError as exc:
            self._fatal(str(exc), None)
