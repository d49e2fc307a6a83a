"""``reef export``: a topic's events as JSON lines or Parquet (see :mod:`reef.history.export`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core.errors import ConfigError
from reef.core.topics import ALL_TOPICS
from reef.history import SkippedRecord, open_stream
from reef.history.export import write_jsonl, write_parquet
from reef.settings import Settings

#: ISO 8601 as operators write it: date, seconds, fractions, an offset or ``Z``
_SINCE_FORMATS = [
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S%z",
    "%Y-%m-%dT%H:%M:%S.%f%z",
]


async def _export(
    settings: Settings, topic: str, fmt: str, since: datetime | None, output: Path
) -> tuple[int, list[SkippedRecord]]:
    """(rows written, records skipped as undecodable)."""
    async with open_stream(settings, topic, since=since, undecodable="skip") as stream:
        if fmt == "parquet":
            written = await write_parquet(stream, topic, output)
        else:
            written = await write_jsonl(stream, output)
        return written, stream.skipped


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
    try:
        written, skipped = asyncio.run(_export(settings, topic, fmt, moment, output))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"{written} event(s) of {topic} written to {output}")
    if skipped:
        first = skipped[0]
        click.echo(
            f"{len(skipped)} undecodable record(s) skipped, the first at "
            f"{first.topic}[{first.partition}]@{first.offset}: {first.reason}",
            err=True,
        )
