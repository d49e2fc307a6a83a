"""Typed events over an :class:`~reef.log.base.EventLog`: encode, route, key by scenario."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from reef.codec import EventCodec
from reef.errors import CodecError
from reef.events import Event
from reef.log.base import EventLog, LogRecord, PendingAppend, Position
from reef.topics import topic_for


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A record read back: the decoded event, or why it could not be decoded."""

    record: LogRecord
    event: Event | None
    error: str | None = None


class EventStore:
    """Appends events to their topic keyed by scenario, and reads them back decoded."""

    def __init__(self, log: EventLog, codec: EventCodec | None = None) -> None:
        self.log = log
        self.codec = codec or EventCodec()

    def prepare(self, event: Event) -> PendingAppend:
        """Encode an event (raises EventValidationError before anything is written)."""
        value, headers = self.codec.encode(event)
        return PendingAppend(topic_for(event.type_name()), event.scenario.encode(), value, headers)

    async def append(self, event: Event) -> Position:
        (position,) = await self.append_all([event])
        return position

    async def append_all(self, events: Sequence[Event]) -> list[Position]:
        """Encode all first, so one invalid event means nothing of the batch is written."""
        pending = [self.prepare(event) for event in events]
        return await self.log.append_many(pending)

    async def read(
        self,
        topic: str,
        *,
        start: Mapping[int, int] | None = None,
        follow: bool = False,
        scenario: str | None = None,
    ) -> AsyncIterator[StoredEvent]:
        key = scenario.encode() if scenario is not None else None
        async for record in self.log.read(topic, start=start, follow=follow):
            if key is not None and record.key != key:
                continue
            yield self.decode(record)

    def decode(self, record: LogRecord) -> StoredEvent:
        try:
            return StoredEvent(record, self.codec.decode(record.value))
        except CodecError as exc:
            return StoredEvent(record, None, str(exc))
