"""The embedded event log: one SQLite file with Kafka's topics, partitions and offsets.

Same keys, same partition numbers (Kafka's murmur2 partitioner), same encoded bytes as
the Kafka adapter, so a deployment can move between the two by copying records.

Commit order (group commit, written down once here):

1. ``append``/``append_many`` queue their records with a future and wait.
2. The single writer task takes everything queued (up to ``max_batch`` records) and,
   in the writer thread, opens ``BEGIN IMMEDIATE`` (the cross-process write lock,
   waited for in short steps: :mod:`reef.log.embedded_lock`),
   reads the touched partitions' next offsets, inserts the records
   (:func:`reef.log.embedded_batch.write_batch`: a few statements whatever the batch
   size) and ``COMMIT``s. ``journal_mode=WAL`` + ``synchronous=FULL`` make the commit
   fsync the WAL: one fsync for the whole group.
3. Only then are the group's futures resolved, so an acknowledged append is on disk.
   Appends that arrive while a commit is in flight wait in the queue for the next one
   (group commit: under load one fsync covers every append queued during the previous
   fsync; :attr:`EmbeddedLog.commits` counts them).

A crash before step 2's COMMIT leaves nothing visible (SQLite rolls the WAL frames
back); a crash between the COMMIT and step 3 leaves records that were durable but not
acknowledged, which callers handle by retrying with the same event id (every reader
de-duplicates by id). A failed COMMIT (disk full, I/O error) fails the whole group
with :class:`LogUnavailableError` and writes nothing.

Compacted topics (``reef.core.topics.COMPACTED_TOPICS``: the key topic) keep only the latest
value per key, in the ``compacted`` table: an append upserts the row, a tombstone
(value None) DELETEs it. Every connection runs with ``secure_delete=ON``, so SQLite
zeroes the bytes of deleted rows; :meth:`EmbeddedLog.scrub` then checkpoints and
truncates the WAL, so no copy of a deleted row is left in either file.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from reef.core.errors import LogError, LogUnavailableError, UnknownTopicError
from reef.core.topics import COMPACTED_TOPICS
from reef.log.base import Headers, LogRecord, PendingAppend, Position
from reef.log.embedded_batch import write_batch
from reef.log.embedded_lock import begin_immediate, impatient, patient

logger = logging.getLogger("reef.log")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    key BLOB,
    value BLOB NOT NULL,
    headers TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS records_position ON records (topic, partition, "offset");
CREATE TABLE IF NOT EXISTS partition_heads (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS compacted (
    topic TEXT NOT NULL,
    key BLOB NOT NULL,
    partition INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    value BLOB NOT NULL,
    headers TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, key)
);
CREATE INDEX IF NOT EXISTS compacted_position ON compacted (topic, partition, "offset");
CREATE TABLE IF NOT EXISTS consumer_offsets (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, partition)
);
"""

T = TypeVar("T")

_READ_CHUNK: Final = 500
_READ_RECORDS: Final = (
    'SELECT "offset", key, value, headers, timestamp_ms FROM records '
    'WHERE topic = ? AND partition = ? AND "offset" >= ? AND "offset" < ? '
    'ORDER BY "offset" LIMIT ?'
)
_READ_COMPACTED: Final = _READ_RECORDS.replace("FROM records", "FROM compacted")
_NO_LIMIT: Final = 2**63 - 1
#: how often one query of the partition heads looks for other processes' appends
_POLL_SECONDS: Final = 0.05
#: the longest a follower sleeps with no append signalled (a safety net: the heads
#: watcher signals every append, this process's or another's)
_FOLLOW_WAIT_SECONDS: Final = 1.0
#: reader connections kept open between reads (more are opened while more read at once)
_IDLE_READERS: Final = 8


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Records read from one moment of the log, and each partition's end at that moment."""

    records: list[LogRecord]
    #: topic -> partition -> next offset
    ends: dict[str, dict[int, int]]


def connect(path: Path) -> sqlite3.Connection:
    """A connection with the durability settings every embedded-log writer must use."""
    conn = sqlite3.connect(
        path,
        timeout=30.0,
        isolation_level=None,
        check_same_thread=False,
        # a prepared multi-row INSERT per row count (reef.log.embedded_batch), both tables
        cached_statements=256,
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    # deleted rows (erased data keys) are overwritten with zeros, not just unlinked
    conn.execute("PRAGMA secure_delete=ON")
    return conn


@functools.lru_cache(maxsize=256)
def _decode_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    """Cached: nearly every record of a topic carries the same few header sets (event
    type and schema fingerprint), and the tuple is immutable."""
    return tuple((name, bytes.fromhex(value)) for name, value in json.loads(text))


class EmbeddedLog:
    """:class:`reef.log.base.EventLog` on a local SQLite file."""

    def __init__(self, path: Path, *, partitions: int = 6, max_batch: int = 1000) -> None:
        self.path = path
        self._partitions = partitions
        self._max_batch = max_batch
        self._queue: asyncio.Queue[tuple[list[PendingAppend], asyncio.Future[list[Position]]]]
        self._writer_task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reef-log-writer")
        self._conn: sqlite3.Connection | None = None
        self._topics: dict[str, int] = {}
        #: per-topic append counters: readers sleep until their topic moved (or a poll
        #: interval passed, for appends made by other processes)
        self._versions: dict[str, int] = {}
        #: set (and replaced) at each append; no lock, so a waiter cancelled at shutdown
        #: cannot trip asyncio.Condition's re-acquire bug ("Lock is not acquired", 3.11)
        self._appended = asyncio.Event()
        #: durable commits (one WAL fsync each) made by this log's writer; group commit
        #: keeps it below the number of appends under concurrent load
        self.commits = 0
        self._idle_readers: list[sqlite3.Connection] = []
        self._pooling = True
        self._heads_watcher: asyncio.Task[None] | None = None

    @property
    def partitions(self) -> int:
        return self._partitions

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = await self._in_writer(lambda: connect(self.path))
        await self._in_writer(lambda: self._db().executescript(_SCHEMA))
        await self._in_writer(lambda: impatient(self._db()))  # reef.log.embedded_lock
        await self._load_topics()
        self._queue = asyncio.Queue()
        self._writer_task = asyncio.create_task(self._writer_loop(), name="reef-log-writer")

    async def close(self) -> None:
        if self._heads_watcher is not None:
            self._heads_watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heads_watcher
            self._heads_watcher = None
        if self._writer_task is not None:
            self._writer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer_task
            self._writer_task = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self._in_writer(conn.close)
        self._executor.shutdown(wait=True)
        self._pooling = False
        while self._idle_readers:
            self._idle_readers.pop().close()

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        def create() -> None:
            db = self._db()
            with patient(db):
                db.executemany(
                    "INSERT OR IGNORE INTO topics (name, partitions) VALUES (?, ?)",
                    [(name, self._partitions) for name in topics],
                )

        await self._in_writer(create)
        await self._load_topics()

    async def append(self, topic: str, key: bytes, value: bytes, headers: Headers = ()) -> Position:
        (position,) = await self.append_many([PendingAppend(topic, key, value, tuple(headers))])
        return position

    async def append_many(self, records: Sequence[PendingAppend]) -> list[Position]:
        if self._writer_task is None:
            raise LogUnavailableError("the embedded log is not started")
        for record in records:
            if record.topic not in self._topics:
                await self._load_topics()
                if record.topic not in self._topics:
                    raise UnknownTopicError(f"unknown topic {record.topic!r}")
            if record.value is None and record.topic not in COMPACTED_TOPICS:
                raise LogError(f"a tombstone needs a compacted topic, not {record.topic!r}")
        future: asyncio.Future[list[Position]] = asyncio.get_running_loop().create_future()
        await self._queue.put((list(records), future))
        return await future

    async def end_offsets(self, topic: str) -> dict[int, int]:
        count = await self._partition_count(topic)

        def query() -> dict[int, int]:
            with self._reader() as db:
                rows = db.execute(
                    "SELECT partition, next_offset FROM partition_heads WHERE topic = ?",
                    (topic,),
                ).fetchall()
            ends = dict.fromkeys(range(count), 0)
            ends.update({int(p): int(o) for p, o in rows})
            return ends

        return await asyncio.to_thread(query)

    async def read(
        self,
        topic: str,
        *,
        start: Mapping[int, int] | None = None,
        partitions: Sequence[int] | None = None,
        follow: bool = False,
        until: Mapping[int, int] | None = None,
    ) -> AsyncIterator[LogRecord]:
        count = await self._partition_count(topic)
        wanted = list(partitions) if partitions is not None else list(range(count))
        positions = {p: (start or {}).get(p, 0) for p in wanted}
        stop = (
            None
            if follow
            else (dict(until) if until is not None else await self.end_offsets(topic))
        )
        table = "compacted" if topic in COMPACTED_TOPICS else "records"
        while True:
            marker = self.append_marker([topic])
            batch = await asyncio.to_thread(self._read_chunk, topic, positions, stop, table)
            for record in batch:
                positions[record.partition] = record.offset + 1
                yield record
            if batch:
                continue
            if stop is not None:
                return
            await self.wait_for_append(marker, _FOLLOW_WAIT_SECONDS)

    async def read_snapshot(
        self, topics: Sequence[str], start: Mapping[str, Mapping[int, int]], limit: int
    ) -> Snapshot:
        """Up to ``limit`` records of each partition of each of ``topics`` from ``start``,
        and every partition's next offset, all from ONE read transaction: one moment of
        the log, read in one hop to a reader thread (a host's batch, not a follower)."""
        for topic in topics:
            await self._partition_count(topic)

        def run() -> Snapshot:
            with self._reader() as db:
                db.execute("BEGIN")
                try:
                    return self._snapshot(db, topics, start, limit)
                finally:
                    db.execute("COMMIT")

        return await asyncio.to_thread(run)

    def _snapshot(
        self,
        db: sqlite3.Connection,
        topics: Sequence[str],
        start: Mapping[str, Mapping[int, int]],
        limit: int,
    ) -> Snapshot:
        ends: dict[str, dict[int, int]] = {
            t: dict.fromkeys(range(self._topics[t]), 0) for t in topics
        }
        for topic, partition, offset in db.execute(
            "SELECT topic, partition, next_offset FROM partition_heads"
        ):
            if topic in ends:
                ends[topic][int(partition)] = int(offset)
        records: list[LogRecord] = []
        for topic in topics:
            statement = _READ_COMPACTED if topic in COMPACTED_TOPICS else _READ_RECORDS
            for partition, end in ends[topic].items():
                offset = start.get(topic, {}).get(partition, 0)
                if offset >= end:
                    continue
                records.extend(
                    LogRecord(topic, partition, int(o), k, v, _decode_headers(h), int(ts))
                    for o, k, v, h, ts in db.execute(
                        statement, (topic, partition, offset, end, limit)
                    )
                )
        return Snapshot(records, ends)

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        await self._partition_count(topic)  # raises UnknownTopicError, as on Kafka

        def query() -> dict[int, int]:
            with self._reader() as db:
                rows = db.execute(
                    "SELECT partition, next_offset FROM consumer_offsets "
                    "WHERE grp = ? AND topic = ?",
                    (group, topic),
                ).fetchall()
            return {int(p): int(o) for p, o in rows}

        return await asyncio.to_thread(query)

    async def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        await self._partition_count(topic)  # raises UnknownTopicError, as on Kafka

        def write() -> None:
            db = self._db()
            begin_immediate(db)
            try:
                db.executemany(
                    "INSERT INTO consumer_offsets (grp, topic, partition, next_offset) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (grp, topic, partition) "
                    "DO UPDATE SET next_offset = excluded.next_offset",
                    [(group, topic, p, o) for p, o in offsets.items()],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        await self._guarded(write)

    async def transact(
        self, records: Sequence[PendingAppend], work: Callable[[sqlite3.Connection], None]
    ) -> list[Position]:
        """Append ``records`` and run ``work`` on the same connection, in ONE transaction.

        Hosts of stream processors use it to store state, outputs and input positions
        atomically: after a crash either all of a step's effects are there or none.
        """
        for record in records:
            await self._partition_count(record.topic)
        positions = await self._guarded(lambda: self._write(list(records), work))
        self._mark_appended(records)
        return positions

    async def compacted_values(self, topic: str, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The current value of each of ``keys`` on a compacted topic (absent: deleted)."""
        wanted = list(dict.fromkeys(keys))

        def lookup(db: sqlite3.Connection) -> dict[bytes, bytes]:
            out: dict[bytes, bytes] = {}
            for key in wanted:
                row = db.execute(
                    "SELECT value FROM compacted WHERE topic = ? AND key = ?", (topic, key)
                ).fetchone()
                if row is not None:
                    out[key] = bytes(row[0])
            return out

        return await self.query(lookup) if wanted else {}

    async def scrub(self) -> bool:
        """Checkpoint the WAL into the database and truncate it to zero bytes.

        After a delete (with ``secure_delete``) this leaves no copy of the deleted bytes
        in the WAL. True when the WAL was truncated; False when a reader still held an
        old snapshot past the busy timeout (the next scrub or checkpoint finishes it).
        """

        def checkpoint() -> bool:
            db = self._db()
            with patient(db):  # waits for readers of old snapshots
                busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            return int(busy) == 0

        return await self._guarded(checkpoint)

    async def query(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read-only function on a fresh reader connection, off the event loop."""

        def run() -> T:
            with self._reader() as db:
                return fn(db)

        return await asyncio.to_thread(run)

    def append_marker(self, topics: Sequence[str]) -> dict[str, int]:
        """Take before reading; :meth:`wait_for_append` then misses no append after it."""
        return {topic: self._versions.get(topic, 0) for topic in topics}

    async def wait_for_append(self, marker: Mapping[str, int], seconds: float) -> None:
        """Return once one of the marker's topics got an append since the marker was
        taken (this process's at once, another process's within a poll interval of the
        heads watcher), or after ``seconds``."""
        if self._heads_watcher is None or self._heads_watcher.done():
            # started by the first wait; a watcher that ever ended is started again
            self._heads_watcher = asyncio.create_task(
                self._watch_heads(), name="reef-log-heads-watcher"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not any(self._versions.get(t, 0) != v for t, v in marker.items()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._appended.wait()

    def _mark_appended(self, records: Sequence[PendingAppend]) -> None:
        self._bump({record.topic for record in records})

    def _bump(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self._versions[topic] = self._versions.get(topic, 0) + 1
        self._appended.set()
        self._appended = asyncio.Event()

    async def _watch_heads(self) -> None:
        """Signal appends made by other processes (the processors child, other workers).

        Followers do not read every partition of their topic each poll interval to find
        those (several queries per follower, whether or not anything was written): one
        query of the partition heads per interval finds every topic that moved (a head only
        grows), and only that topic's followers read. The first poll signals every topic,
        so an append made just before the watcher began is not missed. A query that fails
        (the file locked past its timeout, an I/O error) is logged and retried at the next
        interval: followers meanwhile fall back to their own wait.
        """
        seen: dict[str, int] = {}
        while True:
            try:
                heads = await asyncio.to_thread(self._read_heads)
            except sqlite3.Error as exc:
                logger.warning("reading the log's partition heads failed (retried): %s", exc)
                await asyncio.sleep(_POLL_SECONDS)
                continue
            moved = [topic for topic, total in heads.items() if seen.get(topic) != total]
            seen = heads
            if moved:
                self._bump(moved)
            await asyncio.sleep(_POLL_SECONDS)

    def _read_heads(self) -> dict[str, int]:
        """Each topic's total of next offsets: it grows with every append to the topic."""
        with self._reader() as db:
            rows = db.execute(
                "SELECT topic, SUM(next_offset) FROM partition_heads GROUP BY topic"
            ).fetchall()
        return {str(topic): int(total) for topic, total in rows}

    # -- writer side -------------------------------------------------------------

    async def _writer_loop(self) -> None:
        while True:
            first = await self._queue.get()
            group = [first]
            size = len(first[0])
            while size < self._max_batch and not self._queue.empty():
                item = self._queue.get_nowait()
                group.append(item)
                size += len(item[0])
            records = [record for batch, _ in group for record in batch]
            try:
                positions = await self._guarded(functools.partial(self._write, records))
            except LogError as exc:
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                continue
            cursor = 0
            for batch, future in group:
                if not future.done():
                    future.set_result(positions[cursor : cursor + len(batch)])
                cursor += len(batch)
            self._mark_appended(records)

    def _write(
        self, records: list[PendingAppend], work: Callable[[sqlite3.Connection], None] | None = None
    ) -> list[Position]:
        db = self._db()
        begin_immediate(db)
        try:
            if work is not None:
                work(db)
            positions = write_batch(db, records, self._topics, int(time.time() * 1000))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self.commits += 1
        return positions

    async def _guarded(self, fn: Callable[[], T]) -> T:
        try:
            return await self._in_writer(fn)
        except sqlite3.Error as exc:
            raise LogUnavailableError(f"embedded log cannot write: {exc}") from exc

    async def _in_writer(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LogUnavailableError("the embedded log is closed")
        return self._conn

    # -- reader side -------------------------------------------------------------

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A reader connection, kept for the next read (opening one re-reads the schema:
        followers poll every topic 20 times a second, so that was a serving cost)."""
        try:
            conn = self._idle_readers.pop()  # list.pop/append are atomic: any thread may read
        except IndexError:
            conn = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        # a connection left inside a transaction would pin an old snapshot: never reused
        if self._pooling and not conn.in_transaction and len(self._idle_readers) < _IDLE_READERS:
            self._idle_readers.append(conn)
        else:
            conn.close()

    def _read_chunk(
        self,
        topic: str,
        positions: Mapping[int, int],
        stop: Mapping[int, int] | None,
        table: str = "records",
    ) -> list[LogRecord]:
        out: list[LogRecord] = []
        with self._reader() as db:
            for partition, offset in positions.items():
                limit = stop.get(partition, 0) if stop is not None else None
                if limit is not None and offset >= limit:
                    continue
                rows = db.execute(
                    _READ_COMPACTED if table == "compacted" else _READ_RECORDS,
                    (topic, partition, offset, _NO_LIMIT if limit is None else limit, _READ_CHUNK),
                ).fetchall()
                out.extend(
                    LogRecord(topic, partition, int(o), k, v, _decode_headers(h), int(ts))
                    for o, k, v, h, ts in rows
                )
        return out

    async def _load_topics(self) -> None:
        def query() -> dict[str, int]:
            with self._reader() as db:
                return {
                    str(n): int(p) for n, p in db.execute("SELECT name, partitions FROM topics")
                }

        self._topics = await asyncio.to_thread(query)

    async def _partition_count(self, topic: str) -> int:
        if topic not in self._topics:
            await self._load_topics()
        try:
            return self._topics[topic]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {topic!r}") from None
