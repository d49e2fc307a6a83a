"""Replay: rebuild every processor's state and the API projection from the topics alone.

Processors are re-run over their input topics in the order the embedded runtime uses
(per partition: append time, then input-topic order, then offset) into fresh in-memory
state; the API projection is re-folded from its topics. The digests printed can be
compared with those of the live state (``live_digests``): equal digests mean the live
state is exactly what the log implies, which is what makes the log the system of record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reef.core.ids import content_hash
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


async def _all_records(log: EventLog, topics: Iterable[str]) -> list[LogRecord]:
    records = []
    order = {topic: i for i, topic in enumerate(topics)}
    for topic in order:
        records.extend([r async for r in log.read(topic)])
    records.sort(key=lambda r: (r.partition, r.timestamp_ms, order[r.topic], r.offset))
    return records


async def replay_processor(store: EventStore, processor: Processor) -> tuple[DictState, int]:
    state = DictState()
    records = await _all_records(store.log, processor.inputs)
    for record in records:
        stored = store.decode(record)
        if stored.event is not None:
            processor.step(state, stored.event)
    return state, len(records)


async def replay(processors: Sequence[Processor], log: EventLog) -> ReplayResult:
    store = EventStore(log)
    states = {}
    total = 0
    for processor in processors:
        states[processor.name], count = await replay_processor(store, processor)
        total += count
    api = ApiState()
    for record in await _all_records(log, FOLLOWED_TOPICS):
        stored = store.decode(record)
        if stored.event is not None:
            api.apply(stored.event)
    return ReplayResult(states, api, total)


#: reads the tables a host holds durably right now, by processor name: each host answers
#: for its own storage (reef.hosts.embedded, streams.changelog), so replay knows none
DurableTables = Callable[[EventLog, Sequence[str]], Awaitable[dict[str, dict[str, Any]]]]


async def live_digests(
    processors: Sequence[Processor], log: EventLog, durable_tables: DurableTables
) -> dict[str, str]:
    """Digests of the state the running processors hold durably right now."""
    names = [p.name for p in processors]
    tables = await durable_tables(log, names)
    return {name: state_digest(tables.get(name, {})) for name in names}
