"""Reader connections are kept between reads, and a kept one never reads an old snapshot.

Another log on the same file stands in for another process (the processors child): its
appends reach this log's readers through SQLite, not through this log's wake-ups.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reef.contracts.log import read_all
from reef.log.embedded import EmbeddedLog

TOPIC = "t"


@pytest.fixture
async def logs(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedLog, EmbeddedLog]]:
    reader, writer = EmbeddedLog(tmp_path / "log.sqlite3"), EmbeddedLog(tmp_path / "log.sqlite3")
    await reader.start()
    await writer.start()
    await writer.ensure_topics([TOPIC])
    try:
        yield reader, writer
    finally:
        await writer.close()
        await reader.close()


async def test_a_kept_reader_sees_appends_from_another_process(
    logs: tuple[EmbeddedLog, EmbeddedLog],
) -> None:
    reader, writer = logs
    for i in range(3):
        await writer.append(TOPIC, b"k", b"v%d" % i)
        assert [r.value for r in await read_all(reader, TOPIC)] == [
            b"v%d" % n for n in range(i + 1)
        ]


async def test_a_reader_left_in_a_transaction_is_not_kept(
    logs: tuple[EmbeddedLog, EmbeddedLog],
) -> None:
    reader, writer = logs
    await writer.append(TOPIC, b"k", b"first")

    def count(db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT count(*) FROM records").fetchone()[0])

    def pin_a_snapshot(db: sqlite3.Connection) -> int:
        db.execute("BEGIN")
        return count(db)

    for _ in range(10):  # whichever kept connection it gets, none stays pinned
        assert await reader.query(pin_a_snapshot) >= 1
    await writer.append(TOPIC, b"k", b"second")
    counts = {await reader.query(count) for _ in range(10)}
    assert counts == {2}
