"""One group commit's rows on the embedded log, written in a fixed handful of statements.

The writer thread releases the GIL around every SQLite statement and has to win it back
afterwards; while the event loop is busy that wait lasts up to the interpreter's switch
interval (5 ms). So a commit costs what its number of statements costs, not its number
of rows, and a batch of any size is written with at most:

1. one SELECT of the heads of the topics it touches (offsets are assigned from them);
2. one multi-row INSERT per :data:`ROWS_PER_STATEMENT` records;
3. one upsert of the partition heads;
4. on the compacted key topic only: one multi-row upsert of each key's last value and one
   DELETE of the keys whose last record is a tombstone (the batch's net effect per key,
   what applying its records one by one leaves).

The caller holds the write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``), so either all
of these rows are there after a crash or none.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from reef.core.topics import COMPACTED_TOPICS
from reef.log.base import Headers, PendingAppend, Position
from reef.log.partitioner import partition_for

#: rows per multi-row INSERT: 7 values a row stays far below SQLite's variable limit,
#: and the statement cache holds one statement per row count up to this
ROWS_PER_STATEMENT: Final = 64

_INSERT_RECORDS: Final = (
    'INSERT INTO records (topic, partition, "offset", key, value, headers, timestamp_ms) VALUES '
)
_UPSERT_COMPACTED: Final = (
    'INSERT OR REPLACE INTO compacted (topic, key, partition, "offset", value, headers, '
    "timestamp_ms) VALUES "
)
_UPSERT_HEADS: Final = (
    "INSERT INTO partition_heads (topic, partition, next_offset) VALUES {rows} "
    "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
)

Row = tuple[Any, ...]


def encode_headers(headers: Headers) -> str:
    return json.dumps([[name, value.hex()] for name, value in headers])


def write_batch(
    db: sqlite3.Connection,
    records: Sequence[PendingAppend],
    partitions: Mapping[str, int],
    now_ms: int,
) -> list[Position]:
    """Assign offsets to ``records`` (in order) and write them; returns their positions."""
    positions, heads = _assign(db, records, partitions)
    rows: list[Row] = []
    compacted: dict[tuple[str, bytes], Row | None] = {}  # None: the key's last is a tombstone
    texts: dict[tuple[tuple[str, bytes], ...], str] = {}  # a batch has a few header sets
    for record, at in zip(records, positions, strict=True):
        if record.topic in COMPACTED_TOPICS:  # the last record of a key wins
            compacted[(record.topic, record.key)] = _compacted_row(record, at, now_ms)
        elif record.value is None:  # append_many refuses these before they reach the writer
            raise ValueError(f"a tombstone needs a compacted topic, not {record.topic!r}")
        else:
            text = _encoded(texts, record.headers)
            rows.append((at.topic, at.partition, at.offset, record.key, record.value, text, now_ms))
    _insert(db, _INSERT_RECORDS, rows)
    _insert(db, _UPSERT_HEADS, [(t, p, o) for (t, p), o in heads.items()])
    _insert(db, _UPSERT_COMPACTED, [row for row in compacted.values() if row is not None])
    erased = [key for key, row in compacted.items() if row is None]
    if erased:
        db.executemany("DELETE FROM compacted WHERE topic = ? AND key = ?", erased)
    return positions


def _encoded(texts: dict[tuple[tuple[str, bytes], ...], str], headers: Headers) -> str:
    """``headers`` as stored, encoded once per distinct set in a batch."""
    try:
        key = tuple(headers)
        text = texts.get(key)
    except TypeError:  # a value of an unhashable bytes-like type
        return encode_headers(headers)
    if text is None:
        text = texts[key] = encode_headers(headers)
    return text


def _compacted_row(record: PendingAppend, at: Position, now_ms: int) -> Row | None:
    if record.value is None:
        return None
    headers = encode_headers(record.headers)
    return (at.topic, record.key, at.partition, at.offset, record.value, headers, now_ms)


def _assign(
    db: sqlite3.Connection, records: Sequence[PendingAppend], partitions: Mapping[str, int]
) -> tuple[list[Position], dict[tuple[str, int], int]]:
    """Positions of ``records`` and the next offset of every partition they touch."""
    topics = list(dict.fromkeys(record.topic for record in records))
    heads: dict[tuple[str, int], int] = {
        (str(t), int(p)): int(o)
        for t, p, o in db.execute(
            "SELECT topic, partition, next_offset FROM partition_heads "
            "WHERE topic IN (SELECT value FROM json_each(?))",
            (json.dumps(topics),),
        )
    }
    touched: dict[tuple[str, int], int] = {}
    positions = []
    for record in records:
        slot = (record.topic, partition_for(record.key, partitions[record.topic]))
        offset = touched.get(slot, heads.get(slot, 0))
        touched[slot] = offset + 1
        positions.append(Position(record.topic, slot[1], offset))
    return positions, touched


def _insert(db: sqlite3.Connection, statement: str, rows: Sequence[Row]) -> None:
    """``statement`` (ending in VALUES, or with a ``{rows}`` slot) over ``rows``, in chunks."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        values = ", ".join([_placeholders(len(chunk[0]))] * len(chunk))
        sql = statement.format(rows=values) if "{rows}" in statement else statement + values
        db.execute(sql, list(_flatten(chunk)))


def _placeholders(width: int) -> str:
    return "(" + ", ".join("?" * width) + ")"


def _flatten(rows: Iterable[Row]) -> Iterable[Any]:
    return itertools.chain.from_iterable(rows)
