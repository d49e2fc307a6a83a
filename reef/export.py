"""``reef export``: a topic's events as JSON lines or Parquet, for analytics.

Columns are the event envelope, the event type, the log position and every field of the
topic's event types (absent fields are null), so one file holds a topic with several
event types (``reef.samples``: SampleJoined and ReportRejected).

Sealed bodies are exported opened (with their data keys). An erased exchange is absent
from the export; a sample that contains one keeps its row (ids, references, score: the
lineage) with ``trajectory_json`` null.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from reef.artifacts import ClaimCheck, open_store
from reef.core.events import EVENT_TYPES, InferenceRecorded, SampleJoined
from reef.core.topics import ALL_TOPICS, TOPIC_EVENTS
from reef.log import open_log, running
from reef.options import log_options, pop_log_flags, settings_from
from reef.settings import Settings
from reef.wiring import readable_store


def columns(topic: str) -> list[str]:
    names = ["type", "partition", "offset"]
    for event_type in TOPIC_EVENTS[topic]:
        for f in dataclasses.fields(EVENT_TYPES[event_type]):
            if f.name not in names:
                names.append(f.name)
    return names


async def rows(settings: Settings, topic: str, since: datetime | None) -> list[dict[str, Any]]:
    out = []
    claims = ClaimCheck(open_store(settings), settings.claim_check_bytes)
    async with (
        running(open_log(settings, client_id="reef-export")) as log,
        readable_store(log, claims) as store,
    ):
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


#: ISO 8601 as operators write it: date, seconds, fractions, an offset or ``Z``
_SINCE_FORMATS = [
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S%z",
    "%Y-%m-%dT%H:%M:%S.%f%z",
]


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


@click.command("export")
@click.option("--topic", required=True, type=click.Choice(ALL_TOPICS))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "parquet"]), default="jsonl")
@click.option(
    "--since",
    type=click.DateTime(_SINCE_FORMATS),
    help="Only events that occurred at/after this ISO 8601 time (UTC unless it has an offset).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
@log_options
def export(
    topic: str,
    fmt: str,
    since: datetime | None,
    output: Path,
    config_file: Path | None,
    **flags: Any,
) -> None:
    """Write a topic's decoded events to a JSONL or Parquet file."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings
    moment = since.replace(tzinfo=since.tzinfo or UTC) if since else None
    data = asyncio.run(rows(settings, topic, moment))
    if fmt == "parquet":
        write_parquet(data, columns(topic), output)
    else:
        write_jsonl(data, output)
    click.echo(f"{len(data)} event(s) of {topic} written to {output}")
