"""The join hosted by an :class:`EmbeddedRuntime` over a real :class:`EmbeddedLog` in a
temporary directory: the ``log`` fixture (re-exported by tests/unit/conftest.py), a
join workload with its expected fates, and consistency checks of the stored state.
"""

import asyncio
import json
import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reef.catalog import processors
from reef.core import topics
from reef.core.events import (
    Event,
    ReportRejected,
    ReportSubmitted,
    SampleJoined,
)
from reef.core.ids import derived_id
from reef.hosts.embedded import EmbeddedRuntime
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.services.replay import replay_processor, state_digest
from reef.settings import Settings
from reef_dev.events import inference, receipt, report

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedLog]:
    log = EmbeddedLog(tmp_path / "log.sqlite3")
    await log.start()
    await log.ensure_topics(list(topics.ALL_TOPICS))
    try:
        yield log
    finally:
        await log.close()


def settings_for(tmp_path: Path) -> Settings:
    return Settings.of(state_dir=tmp_path)


async def read_events(log: EmbeddedLog, topic: str) -> list[Event]:
    store = EventStore(log)
    out = []
    async for stored in store.read(topic):
        assert stored.event is not None, stored.error
        out.append(stored.event)
    return out


async def settle(runtime: EmbeddedRuntime, timeout: float = 30.0) -> None:
    """Wait until the runtime has processed every input record present now."""
    async with asyncio.timeout(timeout):
        while sum((await runtime.lag()).values()) > 0:
            assert runtime.healthy(), "the runtime task died"
            await asyncio.sleep(0.01)


# ---------------------------------------------------------------------------
# A workload with a known outcome


@dataclass
class Workload:
    """Events to append, and the fates the join must give (by output event id)."""

    events: list[Event]
    joined: set[str]  # SampleJoined ids
    rejected: dict[str, str]  # ReportRejected id -> reason


def sample_id(e: ReportSubmitted) -> str:
    return derived_id("sample", e.scenario, e.event_id, e.content_hash)


def rejected_id(e: ReportSubmitted) -> str:
    return derived_id("rejected", e.scenario, e.event_id, e.content_hash)


def join_workload(count: int, *, scenarios: Sequence[str] = ("s1", "s2", "s3")) -> Workload:
    """``count`` exchanges each with a report on it, plus resends, conflicts, foreign,
    already-consumed and late (report before exchange) reports, in time order."""
    rng = random.Random(count)
    events: list[Event] = []
    joined: set[str] = set()
    rejected: dict[str, str] = {}
    clock = 0.0

    def tick() -> datetime:
        nonlocal clock
        clock += 0.001
        return at(clock)

    for i in range(count):
        scenario = scenarios[i % len(scenarios)]
        rec = receipt(scenario, i)
        good = report(scenario, f"rep-{i}", [rec], tick(), score=float(i % 2))
        late = i % 10 == 3
        if late:  # the report comes first and parks until its exchange arrives
            events += [good, inference(scenario, rec, tick(), release=f"rel-{i % 4}")]
        else:
            events += [inference(scenario, rec, tick(), release=f"rel-{i % 4}"), good]
        joined.add(sample_id(good))
        roll = rng.random()
        if roll < 0.10:  # an identical resend: nothing more
            events.append(report(scenario, f"rep-{i}", [rec], tick(), score=float(i % 2)))
        elif roll < 0.15:  # other content under the same id: a conflict
            bad = report(scenario, f"rep-{i}", [rec], tick(), score=0.5)
            events.append(bad)
            rejected[rejected_id(bad)] = "conflict"
        elif roll < 0.20:  # another report on the same exchange: already consumed
            again = report(scenario, f"again-{i}", [rec], tick())
            events.append(again)
            rejected[rejected_id(again)] = "already_consumed"
        elif roll < 0.23:  # a receipt of another scenario
            other = scenarios[(i + 1) % len(scenarios)]
            foreign = report(scenario, f"foreign-{i}", [receipt(other, i)], tick())
            events.append(foreign)
            rejected[rejected_id(foreign)] = "foreign_reference"
    return Workload(events, joined, rejected)


def check_fates(outputs: Sequence[Event], workload: Workload) -> None:
    ids = Counter(o.event_id for o in outputs)
    dups = {i: n for i, n in ids.items() if n > 1}
    assert not dups, f"{len(dups)} outputs emitted more than once"
    fates = Counter((o.scenario, o.report_id) for o in outputs if isinstance(o, SampleJoined))
    assert all(n == 1 for n in fates.values()), "a report joined twice"
    samples = {o.event_id for o in outputs if isinstance(o, SampleJoined)}
    assert samples == workload.joined, (
        f"missing {len(workload.joined - samples)}, unexpected {len(samples - workload.joined)}"
    )
    rejections = {o.event_id: o.reason for o in outputs if isinstance(o, ReportRejected)}
    assert rejections == workload.rejected
    receipts = [r for o in outputs if isinstance(o, SampleJoined) for r in o.references]
    assert len(receipts) == len(set(receipts)), "a receipt in two samples"


async def stored_state(log: EmbeddedLog, name: str) -> dict[str, object]:
    def load(db: sqlite3.Connection) -> dict[str, object]:
        rows = db.execute("SELECT key, value FROM processor_state WHERE processor = ?", (name,))
        return {k: json.loads(v) for k, v in rows}

    return await log.query(load)


async def check_consistent(log: EmbeddedLog, tmp_path: Path, name: str = "join") -> None:
    """Positions are at the end, and the stored state is exactly what replay rebuilds."""
    (processor,) = [p for p in processors(settings_for(tmp_path)) if p.name == name]
    for topic in processor.inputs:
        ends = await log.end_offsets(topic)
        done = await log.committed(f"processor:{name}", topic)
        assert {p: done.get(p, 0) for p in ends} == ends, topic
    replayed, _ = await replay_processor(EventStore(log), processor)
    live = await stored_state(log, name)
    assert state_digest(live) == state_digest(replayed.data)


def join_runtime(log: EmbeddedLog, tmp_path: Path, **kwargs: float) -> EmbeddedRuntime:
    (join,) = [p for p in processors(settings_for(tmp_path)) if p.name == "join"]
    return EmbeddedRuntime(log, join, **kwargs)  # type: ignore[arg-type]
