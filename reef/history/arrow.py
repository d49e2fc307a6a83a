"""Stream records as Arrow tables: one table per topic, one row per event.

The columns are the event type, the record's position, the reader's marks (``erased``,
``unavailable``) and every field of the topic's event types, in the order the types
declare them (a field another type of the topic lacks is null). Types come from the
event classes, not from the data, so every batch of a topic has the same schema, an
empty table included: text ``string``, counts ``int64``, scores and latencies
``float64``, ``occurred_at`` ``timestamp[us, UTC]``, id lists ``list<string>``, votes
``list<int64>``, sealed blobs ``binary``; mappings (``tags``) are JSON text, so varying
and empty keys need no schema.

pyarrow is imported when a table is made, not with :mod:`reef.history`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from reef.core.events import EVENT_TYPES
from reef.core.topics import TOPIC_EVENTS
from reef.history.reader import StreamRecord, Undecodable, open_stream
from reef.settings import Settings

if TYPE_CHECKING:
    import pyarrow as pa

#: the columns before the events' fields
POSITION = ("type", "partition", "offset")
MARKS = ("erased", "unavailable")


@functools.cache
def _fields(topic: str) -> dict[str, Any]:
    """Field name → its Python type (None removed), over the topic's event types."""
    if topic not in TOPIC_EVENTS:
        raise ValueError(f"not an event topic: {topic!r}")
    found: dict[str, Any] = {}
    for name in TOPIC_EVENTS[topic]:
        hints = typing.get_type_hints(EVENT_TYPES[name])
        for f in dataclasses.fields(EVENT_TYPES[name]):
            found.setdefault(f.name, _without_none(hints[f.name]))
    return found


def _without_none(hint: Any) -> Any:
    if isinstance(hint, types.UnionType):
        (kept,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return kept
    return hint


def _arrow_type(hint: Any) -> pa.DataType:
    import pyarrow as pa

    scalars = {
        str: pa.string(),
        int: pa.int64(),
        float: pa.float64(),
        bool: pa.bool_(),
        bytes: pa.binary(),
        datetime: pa.timestamp("us", tz="UTC"),
    }
    if hint in scalars:
        return scalars[hint]
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return pa.list_(scalars[item])
    if typing.get_origin(hint) is dict:
        return pa.string()  # JSON text
    raise TypeError(f"no Arrow type for {hint!r}")


def columns(topic: str) -> list[str]:
    """Every column of ``topic``'s tables, in order."""
    return [*POSITION, *MARKS, *_fields(topic)]


def schema(topic: str, names: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema of ``topic``'s tables (``names``: only these columns, in order)."""
    import pyarrow as pa

    fixed = {
        "type": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "erased": pa.bool_(),
        "unavailable": pa.string(),
    }
    fields = _fields(topic)
    return pa.schema(
        [(n, fixed[n] if n in fixed else _arrow_type(fields[n])) for n in names or columns(topic)]
    )


def row(record: StreamRecord) -> dict[str, Any]:
    """One record as a row: position, marks and the event's fields (Python values)."""
    event = record.event
    return {
        "type": event.type_name(),
        "partition": record.partition,
        "offset": record.offset,
        "erased": record.erased,
        "unavailable": record.unavailable,
        **{f.name: getattr(event, f.name) for f in dataclasses.fields(event)},
    }


def batch(rows: Sequence[dict[str, Any]], target: pa.Schema) -> pa.RecordBatch:
    """Rows as one record batch of ``target`` (absent fields null, mappings as JSON)."""
    import pyarrow as pa

    cells = [{n: _cell(r.get(n)) for n in target.names} for r in rows]
    return pa.RecordBatch.from_pylist(cells, schema=target)


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else value


def to_arrow(records: Iterable[StreamRecord], topic: str) -> pa.Table:
    """The records of ``topic`` as one table (see the module doc for its columns)."""
    import pyarrow as pa

    target = schema(topic)
    return pa.Table.from_batches([batch([row(r) for r in _of(records, topic)], target)], target)


def _of(records: Iterable[StreamRecord], topic: str) -> Iterator[StreamRecord]:
    for record in records:
        if record.topic != topic:
            raise ValueError(f"a record of {record.topic} in a table of {topic}")
        yield record


async def arrow_batches(
    records: AsyncIterable[StreamRecord], topic: str, *, rows: int = 10_000
) -> AsyncIterator[pa.RecordBatch]:
    """The records of ``topic`` as record batches of at most ``rows`` rows (bounded memory)."""
    target = schema(topic)
    pending: list[dict[str, Any]] = []
    async for record in records:
        pending.extend(row(r) for r in _of([record], topic))
        if len(pending) >= rows:
            yield batch(pending, target)
            pending = []
    if pending:
        yield batch(pending, target)


async def read_tables(
    settings: Settings,
    topics: Sequence[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    scenario: str | None = None,
    start: Mapping[str, Mapping[int, int]] | None = None,
    undecodable: Undecodable = "raise",
) -> dict[str, pa.Table]:
    """Each topic's events as a table, read in one pass (the options of :func:`open_stream`)."""
    found: dict[str, list[StreamRecord]] = {t: [] for t in topics}
    async with open_stream(
        settings,
        topics,
        since=since,
        until=until,
        scenario=scenario,
        start=start,
        undecodable=undecodable,
    ) as stream:
        async for record in stream:
            found[record.topic].append(record)
    return {topic: to_arrow(records, topic) for topic, records in found.items()}
