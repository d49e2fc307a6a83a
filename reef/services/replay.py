"""Replay: rebuild every processor's state and the API projection from the topics alone.

Processors are re-run over their input topics in the order the embedded runtime uses
(per partition: append time, then input-topic order, then offset) into fresh in-memory
state; the API projection is re-folded from its topics. The digests printed can be
compared with those of the live state (``live_digests``): equal digests mean the live
state is exactly what the log implies, which is what makes the log the system of record.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reef.core.ids import content_hash
from reef.core.state import DictState, Processor
from reef.core.topics import STREAMS_APP_ID
from reef.log.base import EventLog, LogRecord
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.services.projection import FOLLOWED_TOPICS, ApiState
from reef.settings import Settings
from reef.wiring import processors


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


async def replay(settings: Settings, log: EventLog) -> ReplayResult:
    store = EventStore(log)
    states = {}
    total = 0
    for processor in processors(settings):
        states[processor.name], count = await replay_processor(store, processor)
        total += count
    api = ApiState()
    for record in await _all_records(log, FOLLOWED_TOPICS):
        stored = store.decode(record)
        if stored.event is not None:
            api.apply(stored.event)
    return ReplayResult(states, api, total)


async def live_digests(settings: Settings, log: EventLog) -> dict[str, str]:
    """Digests of the state the running processors hold durably right now."""
    names = [p.name for p in processors(settings)]
    if isinstance(log, EmbeddedLog):

        def load(db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {name: {} for name in names}
            rows = db.execute("SELECT processor, key, value FROM processor_state")
            for name, key, value in rows:
                out.setdefault(name, {})[key] = json.loads(value)
            return out

        tables = await log.query(load)
    else:
        tables = {name: _json_keys(await _changelog_table(log, name)) for name in names}
    return {name: state_digest(tables.get(name, {})) for name in names}


def _json_keys(table: dict[str, Any]) -> dict[str, Any]:
    """Workers write a table's ``str`` keys JSON-encoded (``'"rec/..."'``): decode them."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        try:
            decoded = json.loads(key)
        except ValueError:
            decoded = key
        out[decoded if isinstance(decoded, str) else key] = value
    return out


async def _changelog_table(log: EventLog, name: str) -> dict[str, Any]:
    """The latest value per key of a stream worker's table changelog (tombstones delete)."""
    table: dict[str, Any] = {}
    async for record in log.read(f"{STREAMS_APP_ID}-{name}-state-changelog"):
        key = (record.key or b"").decode()
        if record.value is None or record.value in (b"", b"null"):
            table.pop(key, None)
        else:
            table[key] = json.loads(record.value)
    return table
