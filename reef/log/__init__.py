"""The event log port and its adapters."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from reef.core.topics import KEYS, key_topic_configs
from reef.log.base import EventLog, LogRecord, PendingAppend, Position
from reef.settings import Settings

__all__ = ["EventLog", "LogRecord", "PendingAppend", "Position", "open_log", "running"]


def open_log(settings: Settings, *, client_id: str = "reef") -> EventLog:
    """The adapter the settings name (not yet started)."""
    if settings.deployment.log == "kafka":
        from reef.log.kafka import KafkaLog

        return KafkaLog(
            settings.kafka.bootstrap,
            partitions=settings.deployment.partitions,
            client_id=client_id,
            topic_prefix=settings.kafka.topic_prefix,
            append_timeout_s=settings.kafka.append_timeout_s,
            topic_configs={KEYS: key_topic_configs(settings.kafka.key_topic_segment_ms)},
        )
    from reef.log.embedded import EmbeddedLog

    return EmbeddedLog(
        settings.deployment.state_dir / "log.sqlite3", partitions=settings.deployment.partitions
    )


@contextlib.asynccontextmanager
async def running(log: EventLog) -> AsyncIterator[EventLog]:
    """Start the log for the block and close it after (flushing what it holds)."""
    await log.start()
    try:
        yield log
    finally:
        await log.close()
