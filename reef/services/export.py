"""``reef export``: a topic's events as JSON lines or Parquet, for analytics.

Columns are the event envelope, the event type, the log position and every field of the
topic's event types (absent fields are null), so one file holds a topic with several
event types (``reef.samples``: SampleJoined and ReportRejected).

Sealed bodies are exported opened (with their data keys). An erased exchange is absent
from the export; a sample that contains one keeps its row (ids, references, score: the
lineage) with ``trajectory_json`` null.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from reef.core.events import EVENT_TYPES, InferenceRecorded, SampleJoined
from reef.core.topics import TOPIC_EVENTS
from reef.services.eventstore import EventStore


def columns(topic: str) -> list[str]:
    names = ["type", "partition", "offset"]
    for event_type in TOPIC_EVENTS[topic]:
        for f in dataclasses.fields(EVENT_TYPES[event_type]):
            if f.name not in names:
                names.append(f.name)
    return names


async def rows(store: EventStore, topic: str, since: datetime | None) -> list[dict[str, Any]]:
    """The topic's events as rows (``store`` opens sealed bodies), oldest first."""
    out = []
    async for stored in store.read(topic):
        event = stored.event
        if event is None or (since is not None and event.occurred_at < since):
            continue
        if stored.erased and isinstance(event, InferenceRecorded):
            continue  # erased: absent
        row = dataclasses.asdict(event)
        if stored.erased and isinstance(event, SampleJoined):
            row["trajectory_json"] = None  # lineage stays, content does not
        row.update(
            type=event.type_name(),
            partition=stored.record.partition,
            offset=stored.record.offset,
        )
        out.append(row)
    return out


def write_jsonl(data: list[dict[str, Any]], output: Path) -> None:
    with output.open("w") as handle:
        for row in data:
            handle.write(json.dumps(row, default=_iso) + "\n")


def write_parquet(data: list[dict[str, Any]], names: list[str], output: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{n: _cell(row.get(n)) for n in names} for row in data])
    if not data:
        table = pa.table({n: pa.array([], pa.string()) for n in names})
    pq.write_table(table, output)


def _cell(value: Any) -> Any:
    """Parquet cell: mappings (tags) as JSON text, so empty and varying keys are fine."""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else value



def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)
