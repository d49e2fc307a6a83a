"""Followers learn of another process's appends from one watcher of the partition heads.

Another log on the same file stands in for another process (the processors child, another
API worker): its appends are not signalled in this log's process. The heads watcher finds
them within a poll interval, and a follower of a topic nobody writes does not read at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.log.embedded import EmbeddedLog

BUSY, QUIET = "busy", "quiet"


@pytest.fixture
async def logs(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedLog, EmbeddedLog]]:
    reader, writer = EmbeddedLog(tmp_path / "log.sqlite3"), EmbeddedLog(tmp_path / "log.sqlite3")
    await reader.start()
    await writer.start()
    await writer.ensure_topics([BUSY, QUIET])
    try:
        yield reader, writer
    finally:
        await writer.close()
        await reader.close()


async def test_a_follower_sees_another_processes_append_within_a_poll_interval(
    logs: tuple[EmbeddedLog, EmbeddedLog],
) -> None:
    reader, writer = logs
    seen: list[float] = []

    async def follow() -> None:
        async for _ in reader.read(BUSY, follow=True):
            seen.append(time.monotonic())
            if len(seen) == 5:
                return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.3)  # the follower is waiting, its watcher running
    delays = []
    for i in range(5):
        sent = time.monotonic()
        await writer.append(BUSY, b"k", b"v%d" % i)
        while len(seen) <= i:
            await asyncio.sleep(0.005)
        delays.append(seen[i] - sent)
        await asyncio.sleep(0.1)
    await follower
    # the fallback wait is 1 s; the watcher polls every 50 ms (slack for a loaded machine)
    assert max(delays) < 0.5, delays


async def test_a_follower_of_a_quiet_topic_does_not_read_while_others_are_written(
    logs: tuple[EmbeddedLog, EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = logs
    reads: list[str] = []
    chunk = reader._read_chunk

    def counted(topic: str, *args: object, **kwargs: object) -> object:
        reads.append(topic)
        return chunk(topic, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "_read_chunk", counted)

    async def follow() -> None:
        async for _ in reader.read(QUIET, follow=True):
            pass

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.2)  # the first read, and the watcher's first poll
    before = len(reads)
    for i in range(20):  # a second of another process writing a different topic
        await writer.append(BUSY, b"k", b"v%d" % i)
        await asyncio.sleep(0.05)
    follower.cancel()
    # a follower of a quiet topic does not read on every write to another (2: slack)
    assert len(reads) - before <= 2, reads


async def test_the_watcher_outlives_failed_queries_and_an_ended_one_is_started_again(
    logs: tuple[EmbeddedLog, EmbeddedLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = logs
    real = reader._read_heads
    failures = iter(range(3))

    def flaky() -> dict[str, int]:
        if next(failures, None) is not None:
            raise sqlite3.OperationalError("database is locked")
        return real()

    monkeypatch.setattr(reader, "_read_heads", flaky)

    async def appended_seen() -> float:
        marker = reader.append_marker([BUSY])
        sent = time.monotonic()
        await writer.append(BUSY, b"k", b"v")
        await reader.wait_for_append(marker, 2.0)
        return time.monotonic() - sent

    first = await appended_seen()  # three failed queries (50 ms apart), then found
    watcher = reader._heads_watcher
    assert watcher is not None and not watcher.done()
    watcher.cancel()  # however it ended, the next wait starts another
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    second = await appended_seen()
    restarted = reader._heads_watcher
    assert restarted is not None and restarted is not watcher and not restarted.done()
    # the fallback wait is 2 s here: both were found by a watcher (slack for load)
    assert first < 1.0 and second < 1.0, (first, second)
