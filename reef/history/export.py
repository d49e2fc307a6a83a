"""What ``reef export`` writes: a topic's events as JSON lines or Parquet, streamed.

Columns are the event type, the log position and every field of the topic's event types
(absent fields are null), so one file holds a topic with several event types
(``reef.samples``: SampleJoined and ReportRejected); the Parquet types are
:mod:`reef.history.arrow`'s. Rows are written as they are read (bounded memory).

An export is for people who may keep its files beyond an erasure, so it leaves out what
an erasure removes rather than marking it: an erased exchange is absent, and a sample
that contains one keeps its row (ids, references, score: the lineage) with
``trajectory_json`` null. A body whose claim-checked object cannot be fetched is null
with its ``*_ref`` kept.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from datetime import datetime
from pathlib import Path
from typing import Any

from reef.core.events import InferenceRecorded, SampleJoined
from reef.history.arrow import MARKS, batch, columns, row, schema
from reef.history.reader import StreamRecord


def export_columns(topic: str) -> list[str]:
    """The columns of an export of ``topic`` (the table's, less the reader's marks)."""
    return [n for n in columns(topic) if n not in MARKS]


def export_row(record: StreamRecord) -> dict[str, Any] | None:
    """The row an export holds for ``record``; None when it holds none (erased exchange)."""
    if record.erased and isinstance(record.event, InferenceRecorded):
        return None
    out = row(record)
    for mark in MARKS:
        del out[mark]
    if record.erased and isinstance(record.event, SampleJoined):
        out["trajectory_json"] = None  # lineage stays, content does not
    return out


async def write_jsonl(records: AsyncIterable[StreamRecord], output: Path) -> int:
    """One JSON object per line; the number of rows written."""
    written = 0
    with output.open("w") as handle:
        async for record in records:
            out = export_row(record)
            if out is not None:
                handle.write(json.dumps(out, default=_plain) + "\n")
                written += 1
    return written


async def write_parquet(
    records: AsyncIterable[StreamRecord], topic: str, output: Path, *, rows: int = 10_000
) -> int:
    """A Parquet file of ``topic``'s export columns (row groups of ``rows``); rows written."""
    import pyarrow.parquet as pq

    target = schema(topic, export_columns(topic))
    written = 0
    pending: list[dict[str, Any]] = []
    with pq.ParquetWriter(output, target) as writer:
        async for record in records:
            out = export_row(record)
            if out is not None:
                pending.append(out)
            if len(pending) >= rows:
                writer.write_batch(batch(pending, target))
                written, pending = written + len(pending), []
        if pending or not written:
            writer.write_batch(batch(pending, target))
    return written + len(pending)


def _plain(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):  # a sealed blob (never plaintext): hex
        return value.hex()
    raise TypeError(type(value).__name__)
