"""Typed events over an :class:`~reef.log.base.EventLog`: encode, route, key by scenario."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from reef.artifacts.claimcheck import ClaimCheck
from reef.codec import EventCodec
from reef.errors import CodecError, ReefError
from reef.events import Event, InferenceRecorded
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

    def __init__(
        self, log: EventLog, codec: EventCodec | None = None, claims: ClaimCheck | None = None
    ) -> None:
        self.log = log
        self.codec = codec or EventCodec()
        #: bodies over the claim-check threshold live in the artifact store; readers
        #: get them back transparently
        self.claims = claims
        #: called with the seconds each acknowledged append took (metrics)
        self.observe_append: Callable[[float], None] | None = None

    def prepare(self, event: Event) -> PendingAppend:
        """Encode an event (raises EventValidationError before anything is written)."""
        value, headers = self.codec.encode(event)
        return PendingAppend(topic_for(event.type_name()), event.scenario.encode(), value, headers)

    async def append(self, event: Event) -> Position:
        (position,) = await self.append_all([event])
        return position

    async def append_all(self, events: Sequence[Event]) -> list[Position]:
        """Encode all first, so one invalid event means nothing of the batch is written."""
        if self.claims is not None and any(isinstance(e, InferenceRecorded) for e in events):
            events = await asyncio.to_thread(self._offload_all, events)
        pending = [self.prepare(event) for event in events]
        started = time.perf_counter()
        positions = await self.log.append_many(pending)
        if self.observe_append is not None:
            self.observe_append(time.perf_counter() - started)
        return positions

    async def read(
        self,
        topic: str,
        *,
        start: Mapping[int, int] | None = None,
        follow: bool = False,
        until: Mapping[int, int] | None = None,
        scenario: str | None = None,
    ) -> AsyncIterator[StoredEvent]:
        key = scenario.encode() if scenario is not None else None
        async for record in self.log.read(topic, start=start, follow=follow, until=until):
            if key is not None and record.key != key:
                continue
            yield self.decode(record)

    def decode(self, record: LogRecord) -> StoredEvent:
        try:
            event = self.codec.decode(record.value)
        except CodecError as exc:
            return StoredEvent(record, None, str(exc))
        if self.claims is not None and isinstance(event, InferenceRecorded):
            try:
                event = resolve_claims(event, self.claims)
            except ReefError as exc:
                return StoredEvent(record, None, f"claim-checked body unavailable: {exc}")
        return StoredEvent(record, event)

    def _offload_all(self, events: Sequence[Event]) -> list[Event]:
        assert self.claims is not None
        return [
            offload_claims(e, self.claims) if isinstance(e, InferenceRecorded) else e
            for e in events
        ]


def offload_claims(event: InferenceRecorded, claims: ClaimCheck) -> InferenceRecorded:
    """Move request/response bodies above the threshold into the store (by sha256)."""
    request, request_ref = (
        claims.offload(event.request_json) if event.request_json else (None, None)
    )
    response, response_ref = (
        claims.offload(event.response_json) if event.response_json else (None, None)
    )
    if request_ref is None and response_ref is None:
        return event
    return replace(
        event,
        request_json=request if request_ref else event.request_json,
        request_ref=request_ref,
        response_json=response if response_ref else event.response_json,
        response_ref=response_ref,
    )


def resolve_claims(event: InferenceRecorded, claims: ClaimCheck) -> InferenceRecorded:
    """The event with its claim-checked bodies fetched (and sha256-verified) back inline."""
    if event.request_ref is None and event.response_ref is None:
        return event
    return replace(
        event,
        request_json=claims.resolve(None, event.request_ref)
        if event.request_ref
        else event.request_json,
        response_json=claims.resolve(None, event.response_ref)
        if event.response_ref
        else event.response_json,
    )
