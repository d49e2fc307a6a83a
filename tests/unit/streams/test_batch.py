"""One task's batch (streams/batch.py) on real RocksDB stores, without a broker: what
step 1 computes (reads of its own writes, one change per written key, the hinted keys
fetched at once), that nothing of it reaches a store before its transaction commits, and
that a stalled commit ends the worker."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import pytest

from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event, SampleJoined
from reef.core.join import JoinProcessor
from reef.core.kernel import TopicOrder
from reef.hosts.state_codec import load_value
from reef_dev.events import inference, receipt, report
from streams.batch import YIELD_EVERY, BatchRunner
from streams.records import FetchedRecord, Row, TopicPartition
from streams.store import PartitionStore
from streams.task import Task, hosted_processors, task_buffer
from streams.transaction import CommitStalledError

SCENARIO = "batch-s"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Feed:
    """Encodes events into records of partition 0, offsets counted per topic."""

    def __init__(self) -> None:
        self.codec = EventCodec()
        self.offsets: dict[str, int] = {}

    def records(self, events: Sequence[Event]) -> list[FetchedRecord]:
        out: list[FetchedRecord] = []
        for event in events:
            topic = topics.topic_for(event.type_name())
            offset = self.offsets.get(topic, 0)
            self.offsets[topic] = offset + 1
            value, _ = self.codec.encode(event)
            out.append(FetchedRecord(topic, 0, offset, 1_000 + len(out), None, value))
        return out


def unreachable(reason: str, exc: BaseException | None) -> NoReturn:
    raise AssertionError(f"the batch ended the worker: {reason}") from exc


@pytest.fixture
def runner() -> BatchRunner:
    hosted = hosted_processors([JoinProcessor()], "", "reef-streams")
    return BatchRunner(hosted, EventCodec(), topic_prefix="", fatal=unreachable)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, PartitionStore]]:
    store = PartitionStore(tmp_path / "join-0")
    yield {"join": store}
    store.close()


def exchanges_and_reports(first: int, count: int) -> list[Event]:
    recs = [receipt(SCENARIO, first + i) for i in range(count)]
    return [inference(SCENARIO, r, AT) for r in recs] + [
        report(SCENARIO, f"report-{first + i}", [r], AT) for i, r in enumerate(recs)
    ]


def joined(outputs: Sequence[tuple[str, bytes, bytes, object]]) -> list[str]:
    decoded = [EventCodec().decode(value) for _, _, value, _ in outputs]
    return [e.report_id for e in decoded if isinstance(e, SampleJoined)]


async def test_a_report_joins_an_exchange_written_earlier_in_the_same_batch(
    runner: BatchRunner, stores: dict[str, PartitionStore]
) -> None:
    """The batch's reads are prefetched from the store before any step writes: a key
    found absent there must still read as the batch's own write (across chunks, too)."""
    count = YIELD_EVERY  # exchanges fill one chunk, their reports the next
    pending = await runner.compute(stores, Feed().records(exchanges_and_reports(0, count)))
    assert joined(pending.outputs) == [f"report-{i}" for i in range(count)]


async def test_a_batch_sends_one_change_per_written_key_with_its_last_value(
    runner: BatchRunner, stores: dict[str, PartitionStore]
) -> None:
    pending = await runner.compute(stores, Feed().records(exchanges_and_reports(0, 3)))
    keys = [c.key for c in pending.changes["join"]]
    assert len(keys) == len(set(keys))
    consumed = {c.key: c.value for c in pending.changes["join"] if c.key.startswith("consumed/")}
    assert len(consumed) == 3 and all(v is not None for v in consumed.values())


async def test_a_batch_that_never_commits_leaves_the_store_as_it_was(
    runner: BatchRunner, stores: dict[str, PartitionStore]
) -> None:
    """A crash before step 2's commit: the store (and so the changelog the host would
    have sent, which is only the batch's changes) holds nothing of the batch, and the
    next owner computing it again gets the same outputs and changes."""
    feed = Feed()
    first = await runner.compute(stores, feed.records(exchanges_and_reports(0, 4)))
    store = stores["join"]
    store.commit(first.changes["join"], 7)
    batch = feed.records(exchanges_and_reports(4, 4))
    lost = await runner.compute(stores, batch)  # computed, then the worker died
    assert lost.changes["join"]
    for change in lost.changes["join"]:
        assert store.get(change.key) is None
    store._cache.clear()  # from RocksDB too
    for change in lost.changes["join"]:
        assert store.get(change.key) is None
    assert store.position == 7
    again = await runner.compute(stores, batch)
    assert again.outputs == lost.outputs
    assert again.changes == lost.changes
    assert joined(again.outputs) == [f"report-{i}" for i in range(4, 8)]


async def test_a_later_batch_reads_what_an_earlier_one_committed(
    runner: BatchRunner, stores: dict[str, PartitionStore]
) -> None:
    feed = Feed()
    recs = [receipt(SCENARIO, i) for i in range(3)]
    first = await runner.compute(stores, feed.records([inference(SCENARIO, r, AT) for r in recs]))
    assert first.outputs == []
    stores["join"].commit(first.changes["join"])
    stores["join"]._cache.clear()  # the reports' prefetch reads RocksDB
    reports = [report(SCENARIO, f"report-{i}", [r], AT) for i, r in enumerate(recs)]
    second = await runner.compute(stores, feed.records(reports))
    assert joined(second.outputs) == ["report-0", "report-1", "report-2"]


CHANGELOG = "reef-streams-join-state-changelog"
INFERENCE_TP = TopicPartition(topics.INFERENCE, 0)
REPORTS_TP = TopicPartition(topics.REPORTS, 0)


class Transactions:
    """A task's producer over nothing: what each commit carried; each reports the
    changelog's end after it; ``stall`` makes a commit time out."""

    def __init__(self, store: PartitionStore, *, stall: bool = False) -> None:
        self.store = store
        self.stall = stall
        self.commits: list[tuple[dict[str, list[Row]], dict[TopicPartition, int]]] = []
        self.store_during_commit: list[object] = []

    async def commit(
        self, rows: Mapping[str, Sequence[Row]], offsets: Mapping[TopicPartition, int]
    ) -> dict[str, int]:
        if self.stall:
            raise CommitStalledError("transaction commit did not complete")
        self.store._cache.clear()
        self.store_during_commit = [
            self.store.get(json.loads(key)) for key, _, _ in rows[CHANGELOG]
        ]
        self.commits.append(({t: list(r) for t, r in rows.items()}, dict(offsets)))
        return {CHANGELOG: 40 + len(rows[CHANGELOG])}

    async def stop(self) -> None:
        pass


class _Ended(Exception):
    pass


def ends(reason: str, exc: BaseException | None) -> NoReturn:
    raise _Ended(reason)


def task_of(stores: dict[str, PartitionStore], producer: Transactions) -> Task:
    inputs = frozenset({INFERENCE_TP, REPORTS_TP})
    return Task(0, producer, stores, inputs, task_buffer(inputs, TopicOrder()))


async def test_a_batch_commits_outputs_changes_and_offsets_then_writes_the_store(
    runner: BatchRunner, stores: dict[str, PartitionStore]
) -> None:
    """Steps 2 and 3: one transaction carries the outputs, the changelog rows and the next
    offsets (a skipped marker's too); the store holds the changes only once it committed,
    and its position moves to the changelog's end the commit reported."""
    producer = Transactions(stores["join"])
    task = task_of(stores, producer)
    records = Feed().records(exchanges_and_reports(0, 2))
    skipped = {TopicPartition(topics.SAMPLES, 0): 9}
    await runner.run(task, records, skipped)
    ((rows, offsets),) = producer.commits
    assert producer.store_during_commit and all(v is None for v in producer.store_during_commit)
    assert len(rows[topics.SAMPLES]) == 2
    assert len(rows[CHANGELOG]) == len({key for key, _, _ in rows[CHANGELOG]})
    assert offsets == {INFERENCE_TP: 2, REPORTS_TP: 2, **skipped}
    assert task.committed == offsets
    assert stores["join"].position == 40 + len(rows[CHANGELOG])
    stores["join"]._cache.clear()
    written = [stores["join"].get(json.loads(key)) for key, _, _ in rows[CHANGELOG]]
    assert written == [None if v is None else load_value(v) for _, v, _ in rows[CHANGELOG]]
    assert any(value is not None for value in written)


async def test_a_stalled_commit_ends_the_worker_and_leaves_the_store_as_it_was(
    stores: dict[str, PartitionStore],
) -> None:
    runner = BatchRunner(
        hosted_processors([JoinProcessor()], "", "reef-streams"),
        EventCodec(),
        topic_prefix="",
        fatal=ends,
    )
    task = task_of(stores, Transactions(stores["join"], stall=True))
    with pytest.raises(_Ended, match="did not complete"):
        await runner.run(task, Feed().records(exchanges_and_reports(0, 2)), {})
    assert stores["join"].position == 0 and task.committed == {}
