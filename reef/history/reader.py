"""Readable records of one or more topics, from an :class:`EventStore` or from settings.

:class:`EventStream` wraps :meth:`EventStore.read` and :meth:`EventStore.open` (the one
place that decodes and opens records) and adds what a reader of the whole history needs:
a time window, several topics, and a decision for every record that cannot be read in
full (the module doc of :mod:`reef.history` lists them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from reef.artifacts import ClaimCheck, open_store
from reef.codec import EventCodec
from reef.core.errors import CodecError
from reef.core.events import Event
from reef.crypto.rings import open_keyring
from reef.log import open_log, running
from reef.log.base import EventLog, LogRecord
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore, StoredEvent
from reef.settings import Settings

Undecodable = Literal["raise", "skip"]


class UndecodableRecordError(CodecError):
    """A record of the log cannot be decoded or its sealed content cannot be opened."""

    def __init__(self, record: LogRecord, reason: str) -> None:
        super().__init__(f"{record.topic}[{record.partition}]@{record.offset}: {reason}")
        self.topic = record.topic
        self.partition = record.partition
        self.offset = record.offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One event as a reader sees it, with where it is in the log."""

    topic: str
    partition: int
    offset: int
    event: Event
    #: a data key is gone: the content it sealed is absent (bodies and hints None)
    erased: bool = False
    #: why a claim-checked body could not be fetched from the artifact store (its
    #: ``*_ref`` stays set, the body is None); None when everything was read
    unavailable: str | None = None


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A record passed over with ``undecodable="skip"``, and why."""

    topic: str
    partition: int
    offset: int
    reason: str


class EventStream:
    """The events of ``topics`` in a readable form (iterate it with ``async for``).

    ``since``/``until`` keep events with ``since <= occurred_at < until`` (the log has no
    time index: each topic is read from ``start``, its beginning by default). Without
    ``follow`` the topics are read one after the other, each up to its end when its read
    begins; with ``follow`` they are read together, as records arrive, until the caller
    stops iterating. ``scenario`` keeps one scenario's events (the records' key).
    ``store`` opens sealed content when it has a key ring (:func:`readable_store`) and
    fetches claim-checked bodies when it has a claim check; without them records come
    back as stored.
    """

    def __init__(
        self,
        store: EventStore,
        topics: str | Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        follow: bool = False,
        scenario: str | None = None,
        start: Mapping[str, Mapping[int, int]] | None = None,
        undecodable: Undecodable = "raise",
    ) -> None:
        self.store = store
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.since, self.until = since, until
        self.follow = follow
        self.scenario = scenario
        #: per topic, per partition: the first offset to read
        self.start = start or {}
        self.undecodable = undecodable
        #: the records passed over (``undecodable="skip"``), in the order read
        self.skipped: list[SkippedRecord] = []
        # claim-checked bodies left references: one whose object is gone (_without_claims)
        self._bare = EventStore(
            store.log, store.codec, store.claims, store.keys, fetch_claimed=False
        )
        self._iterations: list[AsyncGenerator[StreamRecord, None]] = []

    def __aiter__(self) -> AsyncIterator[StreamRecord]:
        records = self._records()
        self._iterations.append(records)
        return records

    async def aclose(self) -> None:
        """End every iteration still open (one the caller left with ``break``)."""
        while self._iterations:
            await self._iterations.pop().aclose()

    async def _records(self) -> AsyncGenerator[StreamRecord, None]:
        if not self.follow or len(self.topics) == 1:
            for topic in self.topics:
                async with contextlib.aclosing(self._topic(topic)) as records:
                    async for record in records:
                        yield record
            return
        async with contextlib.aclosing(_merged([self._topic(t) for t in self.topics])) as merged:
            async for record in merged:
                yield record

    async def _topic(self, topic: str) -> AsyncGenerator[StreamRecord, None]:
        async for stored in self.store.read(
            topic,
            start=self.start.get(topic),
            follow=self.follow,
            scenario=self.scenario,
            raw=True,
        ):
            if stored.event is not None and not self._wanted(stored.event):
                continue
            record = await self._readable(stored)
            if record is not None:
                yield record

    def _wanted(self, event: Event) -> bool:
        if self.since is not None and event.occurred_at < self.since:
            return False
        return self.until is None or event.occurred_at < self.until

    async def _readable(self, stored: StoredEvent) -> StreamRecord | None:
        """The record to yield; None when filtered out or skipped."""
        opened = await self.store.open(stored) if stored.event is not None else stored
        if opened.event is not None:
            return _record(opened)
        again = await self._without_claims(stored.record)
        if again is not None and again.event is not None:
            # only a claim-checked body was missing (or corrupt): the rest is readable
            return _record(again, opened.error) if self._wanted(again.event) else None
        reason = opened.error or "undecodable"
        if self.undecodable == "raise":
            raise UndecodableRecordError(stored.record, reason)
        at = stored.record
        self.skipped.append(SkippedRecord(at.topic, at.partition, at.offset, reason))
        return None

    async def _without_claims(self, record: LogRecord) -> StoredEvent | None:
        """The record read again without fetching claim-checked bodies (None: there is no
        artifact store); requests stored as blocks are still assembled."""
        if self.store.claims is None:
            return None
        return await self._bare.open(self._bare.decode(record))


def _record(stored: StoredEvent, unavailable: str | None = None) -> StreamRecord:
    assert stored.event is not None
    record = stored.record
    return StreamRecord(
        record.topic, record.partition, record.offset, stored.event, stored.erased, unavailable
    )


async def _merged(
    sources: list[AsyncGenerator[StreamRecord, None]],
) -> AsyncGenerator[StreamRecord, None]:
    """The items of every source as they come; the first failure is raised here."""
    queue: asyncio.Queue[StreamRecord | BaseException | None] = asyncio.Queue(maxsize=1000)

    async def pump(source: AsyncGenerator[StreamRecord, None]) -> None:
        try:
            async for item in source:
                await queue.put(item)
        except Exception as exc:  # handed to the reader, who raises it
            await queue.put(exc)
        else:
            await queue.put(None)
        finally:
            await source.aclose()

    tasks = [asyncio.create_task(pump(source)) for source in sources]
    try:
        running_sources = len(tasks)
        while running_sources:
            item = await queue.get()
            if item is None:
                running_sources -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def readable_store(
    log: EventLog, claims: ClaimCheck | None = None, codec: EventCodec | None = None
) -> AsyncIterator[EventStore]:
    """A store whose reads open sealed content, with its key ring running (tools, CLIs);
    ``codec`` is the deployment's (:func:`reef.log.wire_format.open_codec`)."""
    keys = open_keyring(log)
    await keys.start()
    try:
        yield EventStore(log, codec, claims=claims, keys=keys)
    finally:
        await keys.close()


@contextlib.asynccontextmanager
async def open_stream(
    settings: Settings,
    topics: str | Sequence[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    follow: bool = False,
    scenario: str | None = None,
    start: Mapping[str, Mapping[int, int]] | None = None,
    undecodable: Undecodable = "raise",
) -> AsyncIterator[EventStream]:
    """The deployment's events (its log, key ring and artifact store, from ``settings``)."""
    claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)
    async with (
        running(open_log(settings, client_id="reef-stream")) as log,
        readable_store(log, claims, open_codec(settings)) as store,
    ):
        stream = EventStream(
            store,
            topics,
            since=since,
            until=until,
            follow=follow,
            scenario=scenario,
            start=start,
            undecodable=undecodable,
        )
        try:
            yield stream
        finally:
            await stream.aclose()  # before the log closes under it
