"""The embedded processors' state read on demand from SQLite, with a bounded cache.

* values read back from the ``processor_state`` rows, absent keys as None;
* the cache never weighs more than its budget, whatever the state's size, and evicted
  values read back equal; a value larger than the budget is read but never cached;
* a COMMIT's writes and deletes reach the cache; no read snapshot stays open between
  reads (later commits are seen, a WAL checkpoint is not blocked);
* the join hosted with a tiny cache (almost every read goes to SQLite) gives exactly the
  fates of the workload and a stored state equal to replay's, also across a restart.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from reef.core import topics
from reef.hosts.embedded import EmbeddedRuntime, _create_state_table
from reef.hosts.sqlite_state import SqliteState
from reef.log.embedded import EmbeddedLog, connect
from reef.services.eventstore import EventStore
from tests.support.embedded_join import (
    check_consistent,
    check_fates,
    join_runtime,
    join_workload,
    read_events,
    settle,
)


def table(tmp_path: Path, rows: dict[str, object], processor: str = "p") -> Path:
    path = tmp_path / "state.sqlite3"
    db = connect(path)
    _create_state_table(db)
    db.executemany(
        "INSERT OR REPLACE INTO processor_state (processor, key, value) VALUES (?, ?, ?)",
        [(processor, k, json.dumps(v)) for k, v in rows.items()],
    )
    db.close()
    return path


def test_values_are_read_from_the_table(tmp_path: Path) -> None:
    path = table(tmp_path, {"a": {"x": [1, 2]}, "b": "text"})
    table(tmp_path, {"a": "another processor's"}, processor="q")
    state = SqliteState(path, "p")
    try:
        assert state.get("a") == {"x": [1, 2]}
        assert state.get("b") == "text"
        assert state.get("missing") is None
        assert state.get("a") == {"x": [1, 2]}  # now from the cache
        assert (state.hits, state.misses) == (1, 3)
        assert state.cached() == {"a": {"x": [1, 2]}, "b": "text"}
    finally:
        state.close()


def test_the_cache_stays_within_its_budget(tmp_path: Path) -> None:
    rows: dict[str, object] = {f"rec/{i}": {"body": "x" * 1000, "i": i} for i in range(500)}
    path = table(tmp_path, rows)
    budget = 20_000
    state = SqliteState(path, "p", cache_bytes=budget)
    try:
        for round_ in range(2):
            for key, value in rows.items():
                assert state.get(key) == value, (round_, key)
                assert state.cached_bytes <= budget
        assert 0 < len(state.cached()) < 20
        assert state.misses == 1000  # a working set larger than the cache: all misses
        for i in range(10):
            assert state.get(f"none/{i}") is None
            assert state.cached_bytes <= budget
    finally:
        state.close()


def test_a_value_larger_than_the_budget_is_read_but_not_cached(tmp_path: Path) -> None:
    big = {"parked": ["r" * 100] * 100}
    path = table(tmp_path, {"big": big, "small": 1})
    state = SqliteState(path, "p", cache_bytes=2_000)
    try:
        assert state.get("small") == 1
        assert state.get("big") == big
        assert state.get("big") == big
        assert state.cached() == {"small": 1}
        assert state.misses == 3
    finally:
        state.close()


def test_committed_writes_and_deletes_reach_the_cache(tmp_path: Path) -> None:
    path = table(tmp_path, {"a": 1, "b": 2})
    state = SqliteState(path, "p")
    try:
        assert (state.get("a"), state.get("b"), state.get("c")) == (1, 2, None)
        # the host commits the rows, then tells the state
        db = connect(path)
        db.execute("UPDATE processor_state SET value = '10' WHERE key = 'a'")
        db.execute("DELETE FROM processor_state WHERE key = 'b'")
        db.execute("INSERT INTO processor_state VALUES ('p', 'c', '3')")
        db.close()
        state.committed([("a", 10, 2), ("b", None, 0), ("c", 3, 1)])
        misses = state.misses
        assert (state.get("a"), state.get("b"), state.get("c")) == (10, None, 3)
        assert state.misses == misses  # all three answered from the cache
    finally:
        state.close()


def test_no_read_snapshot_is_held_between_reads(tmp_path: Path) -> None:
    path = table(tmp_path, {"a": 1})
    state = SqliteState(path, "p")
    writer = connect(path)
    try:
        assert state.get("a") == 1
        writer.execute("INSERT INTO processor_state VALUES ('p', 'later', '2')")
        assert state.get("later") == 2  # a commit made after the last read is seen
        (busy, _, _) = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        assert (path.parent / (path.name + "-wal")).stat().st_size == 0
    finally:
        writer.close()
        state.close()


async def test_the_join_with_a_tiny_cache_gives_the_same_fates_and_state(
    log: EmbeddedLog,
    tmp_path: Path,
) -> None:
    store = EventStore(log)
    workload = join_workload(200)
    half = len(workload.events) // 2
    # a cache of a few entries: nearly every read goes to SQLite
    first = join_runtime(log, tmp_path, batch_size=30, cache_bytes=3_000)
    await first.start()
    try:
        for start in range(0, half, 41):
            await store.append_all(workload.events[start : min(start + 41, half)])
            await asyncio.sleep(0.005)
        await settle(first)
        assert first.state.cached_bytes <= 3_000
        assert first.state.misses > first.state.hits
    finally:
        await first.close()
    # a restart resumes from the rows alone
    await store.append_all(workload.events[half:])
    second = EmbeddedRuntime(log, first.processor, batch_size=30, cache_bytes=3_000)
    await second.start()
    try:
        await settle(second)
    finally:
        await second.close()
    assert first.processed + second.processed == len(workload.events)
    check_fates(await read_events(log, topics.SAMPLES), workload)
    await check_consistent(log, tmp_path)


async def test_a_runtime_holds_no_state_in_memory_at_start(
    log: EmbeddedLog,
    tmp_path: Path,
) -> None:
    """The old host loaded the whole table at start; this one reads nothing up front."""
    await EventStore(log).append_all(join_workload(40).events)
    first = join_runtime(log, tmp_path)
    await first.start()
    await settle(first)
    await first.close()

    def rows(db: sqlite3.Connection) -> int:
        (n,) = db.execute("SELECT COUNT(*) FROM processor_state").fetchone()
        return int(n)

    assert await log.query(rows) > 40
    second = join_runtime(log, tmp_path)
    await second.start()
    try:
        await asyncio.sleep(0.05)
        assert second.state.cached() == {}
        assert second.processed == 0
    finally:
        await second.close()
