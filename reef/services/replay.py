"""Replay: rebuild every processor's state and the API projection from the topics alone.

Processors are re-run over their input topics in the kernel's order (per partition
number: append time, then the topic's rank, then offset: :mod:`reef.core.kernel`, the
order both hosts fold in) into fresh in-memory state; the API projection is re-folded
from its topics. The digests printed can be compared with those of the live state
(``live_digests``): equal digests mean the live state is exactly what the log implies,
which is what makes the log the system of record.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reef.codec import EventCodec
from reef.core.collector import collector_paused
from reef.core.events import Event
from reef.core.ids import content_hash
from reef.core.kernel import fold, ready, record_key
from reef.core.state import DictState, Processor
from reef.log.base import EventLog, LogRecord
from reef.services.eventstore import EventStore
from reef.services.projection import FOLLOWED_TOPICS, ApiState


@dataclass(frozen=True, slots=True)
class ReplayResult:
    processor_states: dict[str, DictState]
    api: ApiState
    events: int

    def digests(self) -> dict[str, str]:
        out = {name: state_digest(state.data) for name, state in self.processor_states.items()}
        out["api"] = self.api.digest()
        return out


def state_digest(data: dict[str, Any]) -> str:
    return content_hash(sorted(data.items()))


class _Topics:
    """Each topic a replay needs, read once (all of them concurrently) and decoded once:
    the join, the chain and the API fold share the inputs they have in common."""

    def __init__(self, store: EventStore, records: dict[str, list[LogRecord]]) -> None:
        self._store = store
        self._records = records
        self._events: dict[tuple[str, int, int], Event | None] = {}

    @classmethod
    async def read(cls, store: EventStore, topics: Iterable[str]) -> _Topics:
        names = list(dict.fromkeys(topics))
        lists = await asyncio.gather(*(_read(store.log, topic) for topic in names))
        return cls(store, dict(zip(names, lists, strict=True)))

    def merged(self, topics: Sequence[str]) -> list[tuple[LogRecord, Event | None]]:
        """The records of ``topics`` in the kernel's order (every record read: no
        horizon), each with its event (None: undecodable, skipped by every reader as
        the live hosts skip it)."""
        per_input: dict[tuple[str, int], list[LogRecord]] = defaultdict(list)
        for topic in dict.fromkeys(topics):
            for record in self._records[topic]:
                per_input[record.topic, record.partition].append(record)
        merged: list[LogRecord] = []
        for partition in sorted({p for _, p in per_input}):
            inputs = [rs for (_, p), rs in per_input.items() if p == partition]
            merged += ready(inputs, record_key, None)
        return [(r, self._event(r)) for r in merged]

    def _event(self, record: LogRecord) -> Event | None:
        slot = (record.topic, record.partition, record.offset)
        if slot in self._events:
            return self._events[slot]
        event = self._events[slot] = self._store.decode(record).event
        return event


async def _read(log: EventLog, topic: str) -> list[LogRecord]:
    return [r async for r in log.read(topic)]


def _replay_processor(topics: _Topics, processor: Processor) -> tuple[DictState, int]:
    state = DictState()
    with collector_paused():
        records = topics.merged(processor.inputs)
        fold(processor, state, (event for _, event in records))
    return state, len(records)


async def replay_processor(store: EventStore, processor: Processor) -> tuple[DictState, int]:
    """One processor re-run over its inputs: its state, and how many records it read."""
    return _replay_processor(await _Topics.read(store, processor.inputs), processor)


async def ordered_events(store: EventStore, topics: Sequence[str]) -> list[Event]:
    """The decodable events of ``topics`` in the order replay feeds a processor."""
    read = await _Topics.read(store, topics)
    return [event for _, event in read.merged(topics) if event is not None]


async def replay(
    processors: Sequence[Processor], log: EventLog, codec: EventCodec | None = None
) -> ReplayResult:
    store = EventStore(log, codec)
    needed = [t for p in processors for t in p.inputs] + list(FOLLOWED_TOPICS)
    # the collector is off over the reads too: they keep every record until the end, so
    # its collections would only walk the growing lists (replay is a batch job: the
    # log client's own tasks, the only others running meanwhile, are collected after)
    with collector_paused():
        topics = await _Topics.read(store, needed)
    states = {}
    total = 0
    for processor in processors:
        states[processor.name], count = _replay_processor(topics, processor)
        total += count
    api = ApiState()
    with collector_paused():
        for _, event in topics.merged(FOLLOWED_TOPICS):
            if event is not None:
                api.apply(event)
    return ReplayResult(states, api, total)


#: reads the tables a host holds durably right now, by processor name: each host answers
#: for its own storage (reef.hosts.embedded, streams.changelog), so replay knows none
DurableTables = Callable[[EventLog, Sequence[str]], Awaitable[dict[str, dict[str, Any]]]]
#: reads one processor's durable rows whose keys start with a prefix (same hosts)
DurableRows = Callable[[EventLog, str, str], Awaitable[dict[str, Any]]]


async def live_digests(
    processors: Sequence[Processor], log: EventLog, durable_tables: DurableTables
) -> dict[str, str]:
    """Digests of the state the running processors hold durably right now."""
    names = [p.name for p in processors]
    tables = await durable_tables(log, names)
    return {name: state_digest(tables.get(name, {})) for name in names}
