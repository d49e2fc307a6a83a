"""``reef export``: a topic's events as JSON lines or Parquet (see :mod:`reef.services.export`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from reef.artifacts import ClaimCheck, open_store
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core.topics import ALL_TOPICS
from reef.log import open_log, running
from reef.services.export import columns, rows, write_jsonl, write_parquet
from reef.settings import Settings
from reef.wiring import readable_store

#: ISO 8601 as operators write it: date, seconds, fractions, an offset or ``Z``
_SINCE_FORMATS = [
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S%z",
    "%Y-%m-%dT%H:%M:%S.%f%z",
]



async def _export_rows(
    settings: Settings, topic: str, since: datetime | None
) -> list[dict[str, Any]]:
    claims = ClaimCheck(open_store(settings), settings.claim_check_bytes)
    async with (
        running(open_log(settings, client_id="reef-export")) as log,
        readable_store(log, claims) as store,
    ):
        return await rows(store, topic, since)



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
    data = asyncio.run(_export_rows(settings, topic, moment))
    if fmt == "parquet":
        write_parquet(data, columns(topic), output)
    else:
        write_jsonl(data, output)
    click.echo(f"{len(data)} event(s) of {topic} written to {output}")
