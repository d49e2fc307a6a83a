"""Group commit on the embedded log: appends share fsyncs, and none is acknowledged early.

Every ``COMMIT`` of the writer's connection is one fsync of the WAL (``synchronous=FULL``),
counted by :attr:`EmbeddedLog.commits`. A second connection holding the write lock
stands in for a slow fsync: what arrives meanwhile must wait, then go in one commit.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.core.topics import KEYS
from reef.log.base import PendingAppend, Position
from reef.log.embedded import EmbeddedLog, connect

TOPIC = "t"


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=3)
    await log.start()
    await log.ensure_topics([TOPIC, KEYS])
    try:
        yield log
    finally:
        await log.close()


def stored(path: Path, position: Position) -> bytes | None:
    """The committed value at ``position``, as another connection sees it."""
    with sqlite3.connect(path) as db:
        row = db.execute(
            'SELECT value FROM records WHERE topic = ? AND partition = ? AND "offset" = ?',
            (position.topic, position.partition, position.offset),
        ).fetchone()
    return None if row is None else bytes(row[0])


async def test_appends_queued_during_a_commit_share_the_next_one(log: EmbeddedLog) -> None:
    blocker = connect(log.path)
    blocker.execute("BEGIN IMMEDIATE")  # the writer's next commit cannot finish
    first = asyncio.create_task(log.append(TOPIC, b"k", b"first"))
    await asyncio.sleep(0.2)  # the writer took `first` alone and waits for the lock
    rest = [asyncio.create_task(log.append(TOPIC, b"k%d" % i, b"v%d" % i)) for i in range(49)]
    await asyncio.sleep(0.2)
    assert not first.done() and not any(task.done() for task in rest)
    assert log.commits == 0
    blocker.execute("COMMIT")
    blocker.close()
    positions = await asyncio.gather(first, *rest)
    assert log.commits == 2  # `first`, then the 49 that queued behind it: two fsyncs
    assert len(set(positions)) == 50


async def test_each_acknowledgement_follows_its_own_commit(log: EmbeddedLog) -> None:
    async def append_and_check(i: int) -> None:
        position = await log.append(TOPIC, b"k%d" % (i % 5), b"v%d" % i)
        # nothing else ran since the ack: a fresh connection sees the record committed
        assert stored(log.path, position) == b"v%d" % i

    await asyncio.gather(*(append_and_check(i) for i in range(64)))
    assert log.commits < 64


async def test_a_keys_last_record_in_a_group_wins(log: EmbeddedLog) -> None:
    await log.append_many(
        [
            PendingAppend(KEYS, b"kept", b"old"),
            PendingAppend(KEYS, b"erased", b"secret"),
            PendingAppend(KEYS, b"kept", None),
            PendingAppend(KEYS, b"kept", b"new"),
            PendingAppend(KEYS, b"erased", None),
        ]
    )
    assert await log.compacted_values(KEYS, [b"kept", b"erased"]) == {b"kept": b"new"}
    assert log.commits == 1
