"""``reef log`` and ``reef topics``: look at and administer the event log."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from reef.artifacts import ClaimCheck
from reef.errors import ConfigError
from reef.eventstore import EventStore, StoredEvent
from reef.log import open_log, running
from reef.options import log_options, pop_log_flags, settings_from
from reef.releases import open_store
from reef.topics import ALL_TOPICS


@click.group("topics")
def topics() -> None:
    """Administer Reef's topics."""


@topics.command("create")
@log_options
def topics_create(config_file: Path | None, **flags: Any) -> None:
    """Create every Reef topic (idempotent; infinite retention)."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings

    async def run() -> None:
        async with running(open_log(settings)) as log:
            await log.ensure_topics(list(ALL_TOPICS))
        click.echo(f"topics ready on {settings.log} log: {', '.join(ALL_TOPICS)}")

    asyncio.run(run())


@click.group("log")
def log() -> None:
    """Read the event log."""


@log.command("tail")
@click.option("--topic", required=True, type=click.Choice(ALL_TOPICS), help="Topic to read.")
@click.option("--from-beginning", is_flag=True, help="Start at the first record.")
@click.option("--scenario", help="Only this scenario's events.")
@click.option("--follow/--no-follow", default=True, help="Keep waiting for new records.")
@log_options
def tail(
    topic: str,
    from_beginning: bool,
    scenario: str | None,
    follow: bool,
    config_file: Path | None,
    **flags: Any,
) -> None:
    """Decode a topic's events to JSON lines (undecodable records are reported, not fatal)."""
    settings = settings_from(config_file, **pop_log_flags(flags)).settings
    try:
        artifacts = open_store(settings)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc

    async def run() -> None:
        async with running(open_log(settings, client_id="reef-log-tail")) as log:
            # claim-checked bodies are shown in full, fetched from the artifact store
            store = EventStore(log, claims=ClaimCheck(artifacts, settings.claim_check_bytes))
            start = None if from_beginning else await log.end_offsets(topic)
            async for stored in store.read(topic, start=start, follow=follow, scenario=scenario):
                click.echo(json.dumps(tail_line(stored)))

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


def tail_line(stored: StoredEvent) -> dict[str, Any]:
    """One JSON line: position, and either the event or the decoding error."""
    record = stored.record
    line: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key.decode(errors="replace") if record.key is not None else None,
    }
    if stored.event is None:
        line["error"] = stored.error
        return line
    body = asdict(stored.event)
    line["type"] = stored.event.type_name()
    line["event"] = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in body.items()}
    return line
