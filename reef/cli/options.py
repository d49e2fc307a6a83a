"""Command-line options shared by every ``reef`` command that touches the log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from reef.core.errors import ConfigError
from reef.settings import LoadedSettings, load_settings

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds ``reef serve`` and ``reef engine`` keep an idle client connection open: longer
#: than the idle expiry of the clients agents use (httpx, and the OpenAI and Anthropic SDKs
#: built on it, drop an idle connection after 5 s). With uvicorn's default, also 5 s, the
#: server could close a connection just as a client reused it, and that request failed
#: with a read error the client does not retry (seen in a fault test's steady load).
SERVER_KEEP_ALIVE_S = 75


def log_options(fn: F) -> F:
    """Add -c/--config, --state-dir, --log, --kafka-bootstrap, --partitions,
    --kafka-topic-prefix, --schema-registry-url and --wire-format."""
    decorators = [
        click.option(
            "-c",
            "--config",
            "config_file",
            type=click.Path(path_type=Path, exists=True),
            help="YAML config file (a 'reef:' mapping).",
        ),
        click.option("--state-dir", type=click.Path(path_type=Path), help="Embedded state dir."),
        click.option("--log", type=click.Choice(["embedded", "kafka"]), help="Event log backend."),
        click.option("--kafka-bootstrap", help="Kafka bootstrap servers."),
        click.option("--partitions", type=int, help="Partitions per event topic."),
        click.option("--kafka-topic-prefix", help="Prefix of every Reef topic on Kafka."),
        click.option(
            "--schema-registry-url",
            help="Confluent-compatible schema registry (API base URL).",
        ),
        click.option(
            "--wire-format",
            type=click.Choice(["single-object", "confluent"]),
            help="Header of every value written (confluent: registry schema ids).",
        ),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def settings_from(config_file: Path | None, **flags: Any) -> LoadedSettings:
    """Load settings, turning a configuration error into a clean CLI error."""
    try:
        return load_settings(flags, config_file)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def pop_log_flags(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        k: kwargs.pop(k)
        for k in (
            "state_dir",
            "log",
            "kafka_bootstrap",
            "partitions",
            "kafka_topic_prefix",
            "schema_registry_url",
            "wire_format",
        )
    }
