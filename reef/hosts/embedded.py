"""Hosting processors on the embedded log: state, outputs and positions in one transaction.

Commit protocol (per batch of input records, written down once here):

1. Read about ``batch_size`` records from the processor's input topics (an equal share
   of every input partition, from one snapshot of the log), starting at the positions
   stored under the consumer group ``processor:<name>``; per partition number, keep
   the records up to the horizon and order them as the kernel does
   (:mod:`reef.core.kernel`: append time, the topic's rank, offset), the order of the
   Kafka host and of replay.
2. Fold the records (:func:`reef.core.kernel.fold`) against a write buffer over the
   stored state (:class:`reef.hosts.sqlite_state.SqliteState`: the ``processor_state`` rows,
   read on demand through a bounded cache, so memory does not grow with the state; a
   processor that names the keys its steps read has the batch's keys fetched first,
   a few queries instead of one per key), then encode the outputs and the changed
   values; all of it synchronous, with the cyclic collector paused
   (:mod:`reef.core.collector`).
3. In ONE SQLite transaction (:meth:`EmbeddedLog.transact`): upsert/delete the changed
   state keys, append the output events, store the next input positions.
4. Only after the COMMIT bring the state's cache up to the buffered writes.

A crash before step 3's COMMIT leaves state, outputs and positions as they were, so the
batch is read and processed again with identical results; a crash after it loses nothing
(the cache is memory only: a restarted runtime reads the committed rows).
Exactly-once follows from atomicity, not from de-duplication — but outputs carry
deterministic ids anyway, so downstream de-duplication would remove any slip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from reef.core.collector import collector_paused
from reef.core.errors import ConfigError, LogUnavailableError
from reef.core.kernel import OrderKey, fold, horizon, ready, record_key
from reef.core.state import Processor, ReadHinting, WriteBuffer
from reef.hosts.sqlite_state import DEFAULT_CACHE_BYTES, SqliteState
from reef.hosts.state_codec import dump_value
from reef.log.base import EventLog, LogRecord, PendingAppend
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore

logger = logging.getLogger(__name__)
T = TypeVar("T")
#: topic -> partition -> next offset to process
Positions = dict[str, dict[int, int]]
#: a batch's changed state rows: (key, value or None if deleted, its JSON text or None)
Written = list[tuple[str, Any, str | None]]

#: back-off while the log refuses commits (seconds, doubling up to the maximum)
_RETRY_FIRST = 0.2
_RETRY_MAX = 2.0

_STATE_TABLE = """
CREATE TABLE IF NOT EXISTS processor_state (
    processor TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (processor, key)
)
"""


class EmbeddedRuntime:
    """Runs one processor over the embedded log until closed."""

    def __init__(
        self,
        log: EmbeddedLog,
        processor: Processor,
        *,
        batch_size: int = 1000,
        idle_wait: float = 0.5,
        linger: float = 0.02,
        store: EventStore | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.log = log
        self.processor = processor
        #: decodes inputs (and resolves claim-checked bodies) and encodes outputs
        self.store = store or EventStore(log)
        self.group = f"processor:{processor.name}"
        #: the committed state: the table's rows, with a bounded cache of decoded values
        self.state = SqliteState(log.path, processor.name, cache_bytes=cache_bytes)
        self.positions: dict[str, dict[int, int]] = {}
        self.processed = 0
        #: records read per input partition and batch: about ``batch_size`` in all
        self._per_partition = -(-batch_size // (log.partitions * len(processor.inputs)))
        self._idle_wait = idle_wait
        #: after a wake-up, wait this long so one transaction carries many inputs
        self._linger = linger
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.log.transact([], _create_state_table)
        for topic in self.processor.inputs:
            self.positions[topic] = await self.log.committed(self.group, topic)
        self._task = asyncio.create_task(self._run(), name=f"processor:{self.processor.name}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.state.close()

    def healthy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def lag(self) -> dict[str, int]:
        """Input records not yet processed, per input topic."""
        out = {}
        for topic in self.processor.inputs:
            ends = await self.log.end_offsets(topic)
            done = self.positions.get(topic, {})
            out[topic] = sum(end - done.get(p, 0) for p, end in ends.items())
        return out

    async def run_until_idle(self) -> None:
        """Process everything present now (used by replay and tests)."""
        while await self._step_batch():
            pass

    async def _run(self) -> None:
        backoff = _RETRY_FIRST
        while True:
            marker = self.log.append_marker(self.processor.inputs)
            try:
                progressed = await self._step_batch()
            except LogUnavailableError as exc:
                # e.g. the disk is full: the transaction rolled back, the in-memory state
                # and positions are untouched, so the same batch is simply tried again
                logger.warning(
                    "%s: cannot commit (%s); retrying in %.1fs", self.processor.name, exc, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RETRY_MAX)
                continue
            backoff = _RETRY_FIRST
            if not progressed:
                await self.log.wait_for_append(marker, self._idle_wait)
                await asyncio.sleep(self._linger)

    async def _step_batch(self) -> bool:
        records = await self._read_batch()
        if not records:
            return False
        with collector_paused():  # no await inside: no other task runs meanwhile
            pending, written, positions = self._fold(records)
        changes = [(key, text) for key, _, text in written]
        await self.log.transact(pending, lambda db: self._persist(db, changes, positions))
        self.state.committed((k, v, len(text or "")) for k, v, text in written)
        self.positions = positions
        self.processed += len(records)
        return True

    def _fold(self, records: list[LogRecord]) -> tuple[list[PendingAppend], Written, Positions]:
        """Step 2: the batch's outputs (encoded), changed state rows and next positions."""
        buffer = WriteBuffer(self.state)
        positions = {topic: dict(offsets) for topic, offsets in self.positions.items()}
        decoded = [self.store.decode(record) for record in records]
        if isinstance(self.processor, ReadHinting):
            hint = self.processor.reads
            self.state.prefetch(
                key for s in decoded if s.event is not None for key in hint(s.event)
            )
        for record, stored in zip(records, decoded, strict=True):
            if stored.event is None:
                logger.error(
                    "%s: skipping undecodable %s/%d@%d: %s",
                    self.processor.name,
                    record.topic,
                    record.partition,
                    record.offset,
                    stored.error,
                )
            positions[record.topic][record.partition] = record.offset + 1
        outputs = fold(self.processor, buffer, (stored.event for stored in decoded))
        pending = [self.store.prepare(event) for event in outputs]
        written = [
            (key, value, None if value is None else dump_value(value).decode())
            for key, value in buffer.changes()
        ]
        return pending, written, positions

    async def _read_batch(self) -> list[LogRecord]:
        # One snapshot of every input topic (one read transaction): topics read one after
        # the other while appends go on would otherwise see different moments of the log
        # (a report read without the exchange appended with it), and the interleaving
        # would not be replay's.
        snapshot = await self.log.read_snapshot(
            self.processor.inputs, self.positions, self._per_partition
        )
        per_input: dict[tuple[str, int], list[LogRecord]] = defaultdict(list)
        for record in snapshot.records:
            per_input[record.topic, record.partition].append(record)
        # per partition number, each input that may hold records not read yet, by its
        # last read record's key (None: none read): they may sort before what was read
        partly_read: dict[int, list[OrderKey | None]] = defaultdict(list)
        for topic, ends in snapshot.ends.items():
            for partition, end in ends.items():
                read = per_input.get((topic, partition))
                start = self.positions.get(topic, {}).get(partition, 0)
                if (read[-1].offset + 1 if read else start) < end:
                    partly_read[partition].append(record_key(read[-1]) if read else None)
        batch: list[LogRecord] = []
        for partition in sorted({p for _, p in per_input}):
            inputs = [rs for (_, p), rs in per_input.items() if p == partition]
            batch += ready(inputs, record_key, horizon(partly_read[partition]))
        return _contiguous(batch, self.positions)

    def _persist(
        self,
        db: sqlite3.Connection,
        changes: Sequence[tuple[str, str | None]],
        positions: dict[str, dict[int, int]],
    ) -> None:
        """Write the batch's state changes (JSON text; None deletes) and input positions."""
        store_state_rows(db, self.processor.name, changes)
        db.executemany(
            "INSERT INTO consumer_offsets (grp, topic, partition, next_offset) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (grp, topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
            [(self.group, t, p, o) for t, offsets in positions.items() for p, o in offsets.items()],
        )


def _create_state_table(db: sqlite3.Connection) -> None:
    db.execute(_STATE_TABLE)


def store_state_rows(
    db: sqlite3.Connection, processor: str, changes: Sequence[tuple[str, str | None]]
) -> None:
    """Upsert a processor's changed rows (JSON text) and delete those set to None."""
    db.executemany(
        "INSERT INTO processor_state (processor, key, value) VALUES (?, ?, ?) "
        "ON CONFLICT (processor, key) DO UPDATE SET value = excluded.value",
        [(processor, k, text) for k, text in changes if text is not None],
    )
    db.executemany(
        "DELETE FROM processor_state WHERE processor = ? AND key = ?",
        [(processor, k) for k, text in changes if text is None],
    )


def _contiguous(records: list[LogRecord], positions: dict[str, dict[int, int]]) -> list[LogRecord]:
    """Drop records past a gap, so positions only ever advance over processed records."""
    expected = {(t, p): o for t, offsets in positions.items() for p, o in offsets.items()}
    out = []
    for record in records:
        slot = (record.topic, record.partition)
        if record.offset != expected.get(slot, 0):
            continue
        expected[slot] = record.offset + 1
        out.append(record)
    return out


@runtime_checkable
class SqlQueryable(Protocol):
    """The embedded log's reader: where this host's ``processor_state`` rows live."""

    async def query(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


async def durable_tables(log: EventLog, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each processor's committed ``processor_state`` rows (what a restart reads back)."""
    if not isinstance(log, SqlQueryable):
        raise ConfigError("the embedded processor host keeps its state in the embedded log")

    def load(db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {name: {} for name in names}
        for name, key, value in db.execute("SELECT processor, key, value FROM processor_state"):
            if name in out:
                out[name][key] = json.loads(value)
        return out

    return await log.query(load)


async def durable_rows(log: EventLog, processor: str, prefix: str) -> dict[str, Any]:
    """One processor's committed rows whose keys start with ``prefix`` (one query)."""
    if not isinstance(log, SqlQueryable):
        raise ConfigError("the embedded processor host keeps its state in the embedded log")

    def load(db: sqlite3.Connection) -> dict[str, Any]:
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'processor_state'"
        if db.execute(exists).fetchone() is None:  # no processor has started yet
            return {}
        rows = db.execute(
            "SELECT key, value FROM processor_state "
            "WHERE processor = ? AND key >= ? AND key < ? ORDER BY key",
            (processor, prefix, prefix + "\U0010ffff"),
        )
        return {key: json.loads(value) for key, value in rows}

    return await log.query(load)
