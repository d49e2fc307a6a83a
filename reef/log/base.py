"""The event-log port: topics of partitioned, offset-addressed, immutable records.

Both adapters (``embedded`` on SQLite, ``kafka`` on Apache Kafka) implement
:class:`EventLog` with the same keys, partition numbers, offsets semantics and bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One stored record, as read back (a tombstone reads back with an empty value)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Position:
    """Where an acknowledged append landed."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """One record of a batch append; ``value`` None is a tombstone (compacted topics)."""

    topic: str
    key: bytes
    value: bytes | None
    headers: Headers = field(default_factory=tuple)


class EventLog(Protocol):
    """An append-only, partitioned log; appends return only once durable."""

    @property
    def partitions(self) -> int:
        """Partition count of every event topic (they are co-partitioned)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        """Create the topics if missing (idempotent)."""

    async def append(self, topic: str, key: bytes, value: bytes, headers: Headers = ()) -> Position:
        """Append one record; returns after it is durable (fsync / acks=all)."""
        ...

    async def append_many(self, records: Sequence[PendingAppend]) -> list[Position]:
        """Append several records; returns after all are durable."""
        ...

    async def end_offsets(self, topic: str) -> dict[int, int]:
        """Next offset per partition (the last stable offset on Kafka)."""
        ...

    def read(
        self,
        topic: str,
        *,
        start: Mapping[int, int] | None = None,
        partitions: Sequence[int] | None = None,
        follow: bool = False,
        until: Mapping[int, int] | None = None,
    ) -> AsyncIterator[LogRecord]:
        """Records from ``start`` (default: the beginning) in per-partition order.

        Without ``follow`` the iteration stops at ``until`` (default: the end offsets
        taken when it began; offsets of transaction markers count as read); with
        ``follow`` it waits for new records until the consumer stops iterating.
        """
        ...

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        """The consumer group's committed next-offsets for the topic."""
        ...

    async def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Store the consumer group's next-offsets for the topic."""


# -- optional capabilities: what some logs can do beyond the port -------------------------
# Callers ask for a capability with ``isinstance(log, Capability)``, never for an adapter
# class, so a new log adapter gets the behaviour by implementing the method.


@runtime_checkable
class KeyLookup(Protocol):
    """A log that answers the latest value of keys on a compacted topic directly."""

    async def compacted_values(self, topic: str, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The latest non-tombstone value of each key that has one."""
        ...


@runtime_checkable
class Scrubbable(Protocol):
    """A log whose storage keeps deleted bytes until asked to overwrite them."""

    async def scrub(self) -> bool:
        """Overwrite the bytes of deleted records now; True if anything was done."""
        ...
