"""The Kafka host's protocol step 1 on real RocksDB stores, without a broker: what a
batch computes (reads of its own writes, one change per written key, the hinted keys
fetched at once) and that nothing of it reaches a store before its transaction commits."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event, SampleJoined
from reef.core.join import JoinProcessor
from reef.settings import Settings
from reef.testing.events import inference, receipt, report
from streams.host import YIELD_EVERY, StreamsHost, Task
from streams.partition_buffer import PartitionBuffer
from streams.store import PartitionStore

SCENARIO = "batch-s"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True)
class Record:
    """The fields of an aiokafka ConsumerRecord the host reads."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)


class Feed:
    """Encodes events into records of partition 0, offsets counted per topic."""

    def __init__(self) -> None:
        self.codec = EventCodec()
        self.offsets: dict[str, int] = {}

    def records(self, events: Sequence[Event]) -> list[Record]:
        out: list[Record] = []
        for event in events:
            topic = topics.topic_for(event.type_name())
            offset = self.offsets.get(topic, 0)
            self.offsets[topic] = offset + 1
            value, headers = self.codec.encode(event)
            out.append(Record(topic, 0, offset, 1_000 + len(out), value, tuple(headers)))
        return out


@pytest.fixture
def host(tmp_path: Path) -> StreamsHost:
    return StreamsHost(
        Settings(state_dir=tmp_path), tmp_path / "data", processors=[JoinProcessor()]
    )


@pytest.fixture
def task(host: StreamsHost) -> Iterator[Task]:
    store = PartitionStore(host.data_dir / "join-0")
    buffer = PartitionBuffer([], lambda m: m.topic, host._order)
    yield Task(0, None, {"join": store}, frozenset(), buffer)  # no producer: no broker here
    store.close()


def exchanges_and_reports(first: int, count: int) -> list[Event]:
    recs = [receipt(SCENARIO, first + i) for i in range(count)]
    return [inference(SCENARIO, r, AT) for r in recs] + [
        report(SCENARIO, f"report-{first + i}", [r], AT) for i, r in enumerate(recs)
    ]


def joined(host: StreamsHost, outputs: Sequence[tuple[str, bytes, bytes, object]]) -> list[str]:
    decoded = [host.codec.decode(value) for _, _, value, _ in outputs]
    return [e.report_id for e in decoded if isinstance(e, SampleJoined)]


async def test_a_report_joins_an_exchange_written_earlier_in_the_same_batch(
    host: StreamsHost, task: Task
) -> None:
    """The batch's reads are prefetched from the store before any step writes: a key
    found absent there must still read as the batch's own write (across chunks, too)."""
    count = YIELD_EVERY  # exchanges fill one chunk, their reports the next
    pending = await host._compute(task, Feed().records(exchanges_and_reports(0, count)))
    assert joined(host, pending.outputs) == [f"report-{i}" for i in range(count)]


async def test_a_batch_sends_one_change_per_written_key_with_its_last_value(
    host: StreamsHost, task: Task
) -> None:
    pending = await host._compute(task, Feed().records(exchanges_and_reports(0, 3)))
    keys = [c.key for c in pending.changes["join"]]
    assert len(keys) == len(set(keys))
    consumed = {c.key: c.value for c in pending.changes["join"] if c.key.startswith("consumed/")}
    assert len(consumed) == 3 and all(v is not None for v in consumed.values())


async def test_a_batch_that_never_commits_leaves_the_store_as_it_was(
    host: StreamsHost, task: Task
) -> None:
    """A crash before step 2's commit: the store (and so the changelog the host would
    have sent, which is only the batch's changes) holds nothing of the batch, and the
    next owner computing it again gets the same outputs and changes."""
    feed = Feed()
    first = await host._compute(task, feed.records(exchanges_and_reports(0, 4)))
    store = task.stores["join"]
    store.commit(first.changes["join"], 7)
    batch = feed.records(exchanges_and_reports(4, 4))
    lost = await host._compute(task, batch)  # computed, then the worker died
    assert lost.changes["join"]
    for change in lost.changes["join"]:
        assert store.get(change.key) is None
    store._cache.clear()  # from RocksDB too
    for change in lost.changes["join"]:
        assert store.get(change.key) is None
    assert store.position == 7
    again = await host._compute(task, batch)
    assert again.outputs == lost.outputs
    assert again.changes == lost.changes
    assert joined(host, again.outputs) == [f"report-{i}" for i in range(4, 8)]


async def test_a_later_batch_reads_what_an_earlier_one_committed(
    host: StreamsHost, task: Task
) -> None:
    feed = Feed()
    recs = [receipt(SCENARIO, i) for i in range(3)]
    first = await host._compute(task, feed.records([inference(SCENARIO, r, AT) for r in recs]))
    assert first.outputs == []
    task.stores["join"].commit(first.changes["join"])
    task.stores["join"]._cache.clear()  # the reports' prefetch reads RocksDB
    reports = [report(SCENARIO, f"report-{i}", [r], AT) for i, r in enumerate(recs)]
    second = await host._compute(task, feed.records(reports))
    assert joined(host, second.outputs) == ["report-0", "report-1", "report-2"]
