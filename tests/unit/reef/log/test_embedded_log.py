"""The EventLog contract on the embedded (SQLite) adapter, plus what only it has."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.contracts.log import LogContract, read_all
from reef.core.errors import LogUnavailableError
from reef.log.base import EventLog, PendingAppend
from reef.log.embedded import EmbeddedLog


class TestEmbeddedLog(LogContract):
    @pytest.fixture
    async def log(self, tmp_path: Path) -> AsyncIterator[EventLog]:
        log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=self.PARTITIONS)
        await log.start()
        try:
            yield log
        finally:
            await log.close()


async def test_records_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    first = EmbeddedLog(path, partitions=3)
    await first.start()
    await first.ensure_topics(["t"])
    batch = [PendingAppend("t", b"k%d" % i, b"v%d" % i) for i in range(9)]
    positions = await first.append_many(batch)
    await first.commit("g", "t", {0: 1})
    await first.close()

    second = EmbeddedLog(path, partitions=3)
    await second.start()
    try:
        records = {(r.partition, r.offset): r.value for r in await read_all(second, "t")}
        assert records == {(p.partition, p.offset): b"v%d" % i for i, p in enumerate(positions)}
        assert await second.committed("g", "t") == {0: 1}
        nxt = await second.append("t", b"k0", b"after")
        assert nxt.offset == max(p.offset for p in positions if p.partition == nxt.partition) + 1
    finally:
        await second.close()


async def test_two_logs_on_one_file_share_offsets(tmp_path: Path) -> None:
    """Writers in different processes (here: two instances) never reuse an offset."""
    path = tmp_path / "log.sqlite3"
    a, b = EmbeddedLog(path, partitions=2), EmbeddedLog(path, partitions=2)
    await a.start()
    await b.start()
    try:
        await a.ensure_topics(["t"])
        positions = []
        for i in range(10):
            positions.append(await a.append("t", b"same", b"a%d" % i))
            positions.append(await b.append("t", b"same", b"b%d" % i))
        assert [p.offset for p in positions] == list(range(20))
        assert len(await read_all(a, "t")) == 20
    finally:
        await a.close()
        await b.close()


async def test_topic_keeps_the_partition_count_it_was_created_with(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    first = EmbeddedLog(path, partitions=4)
    await first.start()
    await first.ensure_topics(["t"])
    await first.close()
    second = EmbeddedLog(path, partitions=2)
    await second.start()
    try:
        assert set(await second.end_offsets("t")) == {0, 1, 2, 3}
    finally:
        await second.close()


async def test_append_before_start_is_unavailable(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=2)
    with pytest.raises(LogUnavailableError):
        await log.append("t", b"k", b"v")


async def test_a_reader_cancelled_as_an_append_wakes_it_stops_cleanly(tmp_path: Path) -> None:
    """Shutdown cancels readers at any moment, also twice, also just as an append wakes
    them: they must end as a cancellation (never "Lock is not acquired")."""
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=1)
    await log.start()
    try:
        await log.ensure_topics(["t"])
        for i in range(50):
            waiter = asyncio.create_task(log.wait_for_append(log.append_marker(["t"]), 5.0))
            await asyncio.sleep(0)
            appending = asyncio.create_task(log.append("t", b"k", b"v%d" % i))
            for _ in range(i % 5):
                await asyncio.sleep(0)
            waiter.cancel()
            for _ in range(i % 3):
                await asyncio.sleep(0)
            waiter.cancel()  # a second stop request (a task group, a timeout) mid-cancel
            await appending
            outcome = (await asyncio.gather(waiter, return_exceptions=True))[0]
            assert outcome is None or isinstance(outcome, asyncio.CancelledError), outcome
    finally:
        await log.close()
