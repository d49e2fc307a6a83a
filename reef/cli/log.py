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

from reef.artifacts import ClaimCheck, open_store
from reef.cli.options import log_options, pop_log_flags, settings_from
from reef.core.errors import ConfigError, SchemaRegistryError
from reef.core.topics import ALL_TOPICS, LOG_TOPICS
from reef.log import open_log, running
from reef.log.schema_registry import SchemaRegistry, register_schemas, registration_plan
from reef.log.wire_format import open_codec
from reef.services.eventstore import StoredEvent
from reef.wiring import readable_store


@click.group("topics")
def topics() -> None:
    """Administer Reef's topics."""


@topics.command("create")
@log_options
def topics_create(config_file: Path | None, **flags: Any) -> None:
    """Create every Reef topic (idempotent; infinite retention).

    With a schema registry configured, also register every schema (history first) under
    ``<topic>-<record name>`` subjects with BACKWARD compatibility; the registry refuses
    an incompatible one (exit 1, naming the file and subject).
    """
    settings = settings_from(config_file, **pop_log_flags(flags)).settings

    async def run() -> None:
        async with running(open_log(settings)) as log:
            await log.ensure_topics(list(LOG_TOPICS))
        click.echo(f"topics ready on {settings.deployment.log} log: {', '.join(LOG_TOPICS)}")

    asyncio.run(run())
    if settings.wire.schema_registry_url:
        _register_schemas(settings.wire.schema_registry_url, settings.kafka.topic_prefix)


def _register_schemas(url: str, topic_prefix: str) -> None:
    try:
        with SchemaRegistry(url) as registry:
            done = register_schemas(registry, registration_plan(topic_prefix=topic_prefix))
    except SchemaRegistryError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"schemas registered at {url}: {len(done.registered)} new version(s) under "
        f"{len(done.subjects)} subjects, {done.compatibility} compatibility"
    )
    for subject, source in done.registered:
        click.echo(f"  {subject} <- {source.parent.name}/{source.name}")


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
            # claim-checked bodies are shown in full, fetched from the artifact store;
            # sealed ones opened with their data key (an erased record shows no content)
            claims = ClaimCheck(artifacts, settings.artifacts.claim_check_bytes)
            async with readable_store(log, claims, open_codec(settings)) as store:
                start = None if from_beginning else await log.end_offsets(topic)
                async for stored in store.read(
                    topic, start=start, follow=follow, scenario=scenario
                ):
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
    if stored.erased:
        line["erased"] = True
    line["event"] = {k: _plain(v) for k, v in body.items()}
    return line


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):  # a sealed body shown without its key: hex, never text
        return value.hex()
    return value
