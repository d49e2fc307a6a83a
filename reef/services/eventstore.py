"""Typed events over an :class:`~reef.log.base.EventLog`: encode, route, key by scenario.

With a key ring (:mod:`reef.crypto`) the store seals the bodies of every exchange it
appends under a fresh per-record data key, appended in the same batch to the key topic
(in ``body_format``: a request as blocks shared within its session, see
:mod:`reef.services.bodystore`, or whole),
and the hints of every judgement under the keys of the records they quote
(:mod:`reef.crypto.hints`). :meth:`EventStore.read` (or :meth:`EventStore.open`) hands
back readable events: bodies and hints opened (in exchanges, judgements, reports and
samples), or, when a key is gone, the event without that content and ``erased`` set (an
exchange that repeats blocks of an erased record: ``partly_erased``).
:meth:`EventStore.decode` alone gives the stored form (sealed), which is what the stream
processors and replay work on: their decisions never depend on a key.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from reef.artifacts.claimcheck import ClaimCheck
from reef.artifacts.errors import ArtifactError
from reef.codec import EventCodec
from reef.core.errors import CodecError, LogUnavailableError, ReefError
from reef.core.events import (
    Event,
    InferenceRecorded,
    RecordErased,
    ReportSubmitted,
    SampleJoined,
    TurnJudged,
    utc_now,
)
from reef.core.ids import derived_id
from reef.core.sealed import hint_records
from reef.core.topics import topic_for
from reef.crypto.blocks import Parsed
from reef.crypto.bodies import strip_exchange, trajectory_receipts
from reef.crypto.hints import feedback_records, open_feedback, open_judgement, seal_judgement
from reef.crypto.keyring import KeyRing, key_record, tombstone_record
from reef.log.base import EventLog, LogRecord, PendingAppend, Position, Scrubbable
from reef.services.bodystore import BodyFormat, BodyStore, Staged


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A record read back: the decoded event, or why it could not be decoded."""

    record: LogRecord
    event: Event | None
    error: str | None = None
    #: the content is gone (a data key was erased): ``event`` carries no body or hint
    erased: bool = False
    #: an exchange that repeats blocks an erased record introduced: each such block reads
    #: as ``{"erased": true}`` in its body (reef.crypto.blocks); the rest is readable
    partly_erased: bool = False


class EventStore:
    """Appends events to their topic keyed by scenario, and reads them back decoded."""

    def __init__(
        self,
        log: EventLog,
        codec: EventCodec | None = None,
        claims: ClaimCheck | None = None,
        keys: KeyRing | None = None,
        *,
        body_format: BodyFormat = "compressed",
        fetch_claimed: bool = True,
    ) -> None:
        self.log = log
        self.codec = codec or EventCodec()
        #: bodies over the claim-check threshold live in the artifact store; readers
        #: get them back transparently (``fetch_claimed`` False: they stay references,
        #: while requests stored as blocks are still assembled)
        self.claims = claims
        self.fetch_claimed = fetch_claimed
        #: seals appended exchanges and opens them on read (None: stored as given)
        self.keys = keys
        #: how sealed bodies are written (docs/storage.md); every format is read
        self.body_format = body_format
        self.bodies = (
            BodyStore(claims, keys, body_format=body_format, fetch_claimed=fetch_claimed)
            if keys is not None
            else None
        )
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
        """Encode all first, so one invalid event means nothing of the batch is written.

        With a key ring, each exchange's data key goes in the same batch, before it, and
        each judgement's hints are sealed (dropped if a record they quote is erased).
        """
        keys: list[PendingAppend] = []
        staged: list[Staged | None] = []
        if self.bodies is not None:
            events, keys, staged = await self._seal_all(events)
            events = await self._seal_hints(events, keys)
        if self.claims is not None and any(
            _over_threshold(e, self.claims.threshold_bytes) for e in events
        ):
            try:
                events = await asyncio.to_thread(self._offload_all, events)
            except ArtifactError as exc:
                # the body's store is down (S3 unreachable): the exchange cannot be recorded,
                # and nothing of it is in the log: the same answer as a log that is down (503)
                raise LogUnavailableError(f"cannot store a claim-checked body: {exc}") from exc
        pending = [*keys, *(self.prepare(event) for event in events)]
        started = time.perf_counter()
        positions = await self.log.append_many(pending)
        if self.observe_append is not None:
            self.observe_append(time.perf_counter() - started)
        if self.bodies is not None:
            self.bodies.commit(staged)
        return positions[len(keys) :]

    async def _seal_all(
        self, events: Sequence[Event]
    ) -> tuple[list[Event], list[PendingAppend], list[Staged | None]]:
        assert self.bodies is not None
        sealed: list[Event] = []
        keys: list[PendingAppend] = []
        staged: list[Staged | None] = []
        for event in events:
            if isinstance(event, InferenceRecorded) and not event.sealed:
                try:
                    event, key, introduced = await self.bodies.seal(event)
                except ArtifactError as exc:
                    # the blocks' store is down: not recorded, as when the log is down (503)
                    raise LogUnavailableError(f"cannot store a body's blocks: {exc}") from exc
                keys.append(key_record(event.event_id, key))
                staged.append(introduced)
            sealed.append(event)
        return sealed, keys, staged

    def prepare_request(
        self,
        scenario: str,
        receipt: str,
        tags: Mapping[str, str],
        request: str,
        *,
        raw: bytes | None = None,
        parsed: object = None,
    ) -> None:
        """An exchange's request is known before its answer: with ``body_format`` blocks
        its new blocks are stored while the upstream answers (a no-op otherwise).
        ``raw`` (the UTF-8 bytes ``request`` was decoded from) and ``parsed`` (the
        object parsed from them) spare parsing it again."""
        if self.bodies is not None:
            hint = None if raw is None else Parsed(raw, parsed)
            self.bodies.prepare(scenario, receipt, tags, request, hint)

    async def _seal_hints(
        self, events: Sequence[Event], fresh: Sequence[PendingAppend]
    ) -> Sequence[Event]:
        hinted = [e for e in events if isinstance(e, TurnJudged) and e.hints]
        if not hinted:
            return events
        assert self.keys is not None
        new = {p.key.decode(): p.value for p in fresh if p.key is not None and p.value}
        wanted = {r for e in hinted for r in hint_records(e)} - set(new)
        found = {**await self.keys.get_many(wanted), **new}
        return [seal_judgement(e, found) if isinstance(e, TurnJudged) else e for e in events]

    async def erase(
        self,
        scenario: str,
        record_id: str,
        *,
        producer: str,
        requested_by: str | None = None,
        announce: bool = True,
    ) -> None:
        """Destroy a record's data key and (with ``announce``) append RecordErased, in one
        durable append; then drop every copy of the key this process holds.

        On the embedded log the key row is DELETEd (zeroed) and the WAL truncated; on
        Kafka the tombstone lets the cleaner remove the key from the broker's files.
        A repeated erase (``announce=False``) writes the tombstone again: harmless, and
        on Kafka it rolls the key topic's segment once ``segment.ms`` passed.
        """
        pending = [tombstone_record(record_id)]
        if announce:
            event = RecordErased(
                event_id=derived_id("erased", scenario, record_id),
                scenario=scenario,
                occurred_at=utc_now(),
                producer=producer,
                record_id=record_id,
                requested_by=requested_by,
            )
            pending.append(self.prepare(event))
        await self.log.append_many(pending)
        if self.keys is not None:
            self.keys.forget(record_id)
        if self.bodies is not None:
            self.bodies.forget(record_id)
        if isinstance(self.log, Scrubbable):
            await self.log.scrub()

    async def read(
        self,
        topic: str,
        *,
        start: Mapping[int, int] | None = None,
        follow: bool = False,
        until: Mapping[int, int] | None = None,
        scenario: str | None = None,
        raw: bool = False,
    ) -> AsyncIterator[StoredEvent]:
        """Decoded events; opened (see :meth:`open`) unless ``raw`` or without a key ring."""
        key = scenario.encode() if scenario is not None else None
        async for record in self.log.read(topic, start=start, follow=follow, until=until):
            if key is not None and record.key != key:
                continue
            stored = self.decode(record)
            yield stored if raw or self.keys is None else await self.open(stored)

    async def open(self, stored: StoredEvent) -> StoredEvent:
        """The readable form: sealed bodies and hints opened, or stripped and ``erased``
        when a key is gone. Without a key ring, the stored form unchanged."""
        event = stored.event
        if self.keys is None or self.bodies is None or event is None:
            return stored
        try:
            if isinstance(event, InferenceRecorded) and event.sealed:
                key = await self.keys.get(event.event_id)
                if key is None:
                    return replace(stored, event=strip_exchange(event), erased=True)
                opened, complete = await self.bodies.open_exchange(event, key)
                return replace(stored, event=opened, partly_erased=not complete)
            if isinstance(event, SampleJoined):
                return await self._open_sample(stored, event)
            if isinstance(event, TurnJudged) and event.hints_sealed is not None:
                keys = await self.keys.get_many(hint_records(event))
                judged, complete = open_judgement(event, keys)
                return replace(stored, event=judged, erased=not complete)
            if isinstance(event, ReportSubmitted):
                feedback, complete = await self._open_feedback(event.feedback_json, event.scenario)
                return replace(
                    stored, event=replace(event, feedback_json=feedback), erased=not complete
                )
        except (ReefError, LookupError, ValueError) as exc:
            return StoredEvent(stored.record, None, f"sealed content unreadable: {exc}")
        return stored

    async def _open_feedback(self, feedback_json: str, scenario: str) -> tuple[str, bool]:
        """A report's or sample's feedback with sealed hints opened (see open_feedback)."""
        assert self.keys is not None
        records = feedback_records(feedback_json)
        if not records:
            return feedback_json, True
        return open_feedback(feedback_json, scenario, await self.keys.get_many(records))

    async def _open_sample(self, stored: StoredEvent, event: SampleJoined) -> StoredEvent:
        assert self.keys is not None and self.bodies is not None
        feedback, hints_opened = await self._open_feedback(event.feedback_json, event.scenario)
        event = replace(event, feedback_json=feedback)
        trajectory = json.loads(event.trajectory_json or "[]")
        receipts = trajectory_receipts(trajectory) if isinstance(trajectory, list) else []
        if not receipts:
            return replace(stored, event=event, erased=not hints_opened)
        keys = await self.keys.get_many(receipts)
        opened, complete = await self.bodies.open_trajectory(trajectory, event.scenario, keys)
        view = replace(event, trajectory_json=json.dumps(opened))
        return replace(stored, event=view, erased=not (complete and hints_opened))

    def decode(self, record: LogRecord) -> StoredEvent:
        try:
            event = self.codec.decode(record.value)
        except CodecError as exc:
            return StoredEvent(record, None, str(exc))
        if (
            self.claims is not None
            and self.fetch_claimed
            and isinstance(event, InferenceRecorded)
            and not event.sealed
        ):
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


def _over_threshold(event: Event, threshold: int) -> bool:
    """Whether a body of ``event`` may be claim-checked (then it is offloaded in a thread).

    Exact for sealed bodies (bytes); for text, ``4 * len`` bounds its UTF-8 size, so a body
    that might not fit is always sent to :func:`offload_claims`, which decides exactly.
    Most exchanges fit, and skip the thread hop (a fifth of a millisecond per request).
    """
    if not isinstance(event, InferenceRecorded):
        return False
    if event.sealed:
        blobs = (event.request_sealed, event.response_sealed)
        return any(blob is not None and len(blob) > threshold for blob in blobs)
    texts = (event.request_json, event.response_json)
    return any(text is not None and 4 * len(text) > threshold for text in texts)


def offload_claims(event: InferenceRecorded, claims: ClaimCheck) -> InferenceRecorded:
    """Move request/response bodies above the threshold into the store (by sha256).

    Sealed bodies are moved as they are (the object holds the sealed blob).
    """
    if event.sealed:
        request_ref = claims.offload_bytes(event.request_sealed) if event.request_sealed else None
        response_ref = (
            claims.offload_bytes(event.response_sealed) if event.response_sealed else None
        )
        if request_ref is None and response_ref is None:
            return event
        return replace(
            event,
            request_sealed=None if request_ref else event.request_sealed,
            request_ref=request_ref,
            response_sealed=None if response_ref else event.response_sealed,
            response_ref=response_ref,
        )
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
