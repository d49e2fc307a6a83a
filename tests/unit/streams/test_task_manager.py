"""The Kafka host's task manager (streams/task_manager.py) over in-memory partitions and
real RocksDB stores, without a broker: an assignment opens one task per partition number
and restores its stores before the loop may process anything; its inputs start at the
group's committed offsets; a revocation stops the tasks; a task given back keeps its
store and reads on from its position; a stale kept store is restored anew."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reef.core.join import JoinProcessor
from reef.core.kernel import TopicOrder
from reef.hosts import READY_LINE
from streams.partition_buffer import InputPauses
from streams.records import FetchedRecord, TopicPartition
from streams.store import Change
from streams.task import hosted_processors
from streams.task_manager import KEPT_STORE_MAX_AGE_S, TaskManager
from tests.support.memory_kafka import MemoryConsumer, MemoryLog, MemoryProducer

GROUP = "reef-streams"
HOSTED = hosted_processors([JoinProcessor()], "", GROUP)
CHANGELOG = HOSTED[0].changelog
INFERENCE, REPORTS = HOSTED[0].inputs


def inputs_of(*numbers: int) -> set[TopicPartition]:
    return {TopicPartition(topic, n) for topic in (INFERENCE, REPORTS) for n in numbers}


def changelog(n: int) -> TopicPartition:
    return TopicPartition(CHANGELOG, n)


def write_changelog(log: MemoryLog, n: int, values: dict[str, Any]) -> None:
    for key, value in values.items():
        change = Change.of(key, value)
        log.append(changelog(n), change.raw_key, change.raw_value)


class WatchedRestore(MemoryConsumer):
    """The changelog reader, noting at each poll what the loop could see then."""

    manager: TaskManager | None = None
    seen: list[tuple[bool, bool, bool, dict[int, object]]]

    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]:
        manager = self.manager
        assert manager is not None
        self.seen.append(
            (manager.lock.locked(), manager.rebalancing, manager.restoring, dict(manager.tasks))
        )
        return await super().poll(*tps, timeout_ms=timeout_ms, max_records=max_records)


@dataclass
class Worker:
    log: MemoryLog
    consumer: MemoryConsumer
    changelogs: WatchedRestore
    producers: list[MemoryProducer]
    pauses: InputPauses
    manager: TaskManager


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[Worker]:
    log = MemoryLog()
    consumer = MemoryConsumer(log)
    changelogs = WatchedRestore(log, per_poll=2)
    changelogs.seen = []
    producers: list[MemoryProducer] = []

    async def open_producer(n: int) -> MemoryProducer:
        producers.append(MemoryProducer(log, n, [CHANGELOG]))
        return producers[-1]

    pauses = InputPauses(consumer)
    manager = TaskManager(
        HOSTED,
        tmp_path,
        consumer=consumer,
        changelogs=changelogs,
        open_producer=open_producer,
        pauses=pauses,
        order=TopicOrder(),
        group=GROUP,
    )
    changelogs.manager = manager
    yield Worker(log, consumer, changelogs, producers, pauses, manager)
    await manager.close()


async def test_an_assignment_opens_a_task_per_number_with_its_stores_restored_first(
    worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    write_changelog(worker.log, 0, {"k1": 1, "k2": 2, "k3": 3})
    write_changelog(worker.log, 1, {"k1": "one"})
    caplog.set_level("INFO")
    await worker.manager.assigned(inputs_of(0, 1))
    tasks = worker.manager.tasks
    assert sorted(tasks) == [0, 1]
    assert tasks[0].inputs == inputs_of(0) and tasks[1].inputs == inputs_of(1)
    assert [tasks[0].stores["join"].get(k) for k in ("k1", "k2", "k3")] == [1, 2, 3]
    assert tasks[1].stores["join"].get("k1") == "one" and tasks[1].stores["join"].get("k2") is None
    assert (tasks[0].stores["join"].position, tasks[1].stores["join"].position) == (3, 1)
    assert [(p.partition, p.stopped) for p in worker.producers] == [(0, False), (1, False)]
    # while the stores were restored the loop could not run: the lock was held, and no
    # task was visible yet
    assert worker.changelogs.seen
    assert all(seen == (True, True, True, {}) for seen in worker.changelogs.seen)
    assert not worker.manager.rebalancing and not worker.manager.restoring
    assert "assigned partitions [0, 1] (stores kept: []): restored 4 changelog" in caplog.text
    assert caplog.text.count(READY_LINE) == 1


async def test_the_inputs_start_at_the_offsets_the_group_committed(worker: Worker) -> None:
    inference, reports = TopicPartition(INFERENCE, 0), TopicPartition(REPORTS, 0)
    worker.log.committed[inference] = 5  # reports: never committed, from its start
    await worker.manager.assigned(inputs_of(0))
    assert sorted(worker.consumer.seeks) == sorted([(inference, 5), (reports, 0)])
    assert worker.manager.tasks[0].committed == {inference: 5, reports: 0}


async def test_a_revocation_stops_the_tasks_and_resumes_their_paused_inputs(
    worker: Worker,
) -> None:
    await worker.manager.assigned(inputs_of(0, 1))
    worker.pauses.hold_back({TopicPartition(INFERENCE, 1)})
    assert worker.consumer.paused == {TopicPartition(INFERENCE, 1)}
    generation = worker.manager.generation
    await worker.manager.revoked(inputs_of(0, 1))
    assert worker.manager.tasks == {}
    assert all(p.stopped for p in worker.producers)
    assert worker.consumer.paused == set()
    assert worker.manager.generation == generation + 1


async def test_a_number_not_assigned_again_has_its_kept_stores_closed(worker: Worker) -> None:
    await worker.manager.assigned(inputs_of(0, 1))
    stores = {n: task.stores["join"] for n, task in worker.manager.tasks.items()}
    await worker.manager.revoked(inputs_of(0, 1))
    await worker.manager.assigned(inputs_of(1))
    assert sorted(worker.manager.tasks) == [1]
    assert not stores[0].path.exists()  # closed
    assert worker.manager.tasks[1].stores["join"] is stores[1]


async def test_a_task_given_back_keeps_its_store_and_reads_on_from_its_position(
    worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    write_changelog(worker.log, 0, {"k1": 1})
    await worker.manager.assigned(inputs_of(0))
    store = worker.manager.tasks[0].stores["join"]
    store.commit([Change.of("mine", "committed by this task")], position=1)
    await worker.manager.revoked(inputs_of(0))
    write_changelog(worker.log, 0, {"k2": 2})  # another owner committed meanwhile
    caplog.set_level("INFO")
    await worker.manager.assigned(inputs_of(0))
    task = worker.manager.tasks[0]
    assert task.stores["join"] is store
    assert [store.get(k) for k in ("k1", "mine", "k2")] == [1, "committed by this task", 2]
    assert store.position == 2
    assert "assigned partitions [0] (stores kept: [0]): restored 1 changelog" in caplog.text
    assert [p.stopped for p in worker.producers] == [True, False]
    assert task.producer is worker.producers[1]


async def test_a_kept_store_synced_too_long_ago_is_restored_anew(worker: Worker) -> None:
    write_changelog(worker.log, 0, {"k1": 1, "k2": 2})
    await worker.manager.assigned(inputs_of(0))
    store = worker.manager.tasks[0].stores["join"]
    await worker.manager.revoked(inputs_of(0))
    store.synced_at = time.monotonic() - 2 * KEPT_STORE_MAX_AGE_S
    await worker.manager.assigned(inputs_of(0))
    again = worker.manager.tasks[0].stores["join"]
    assert again is not store
    assert [again.get("k1"), again.get("k2")] == [1, 2] and again.position == 2


async def test_closing_stops_every_task_and_closes_every_store(worker: Worker) -> None:
    await worker.manager.assigned(inputs_of(0, 1))
    stores = [task.stores["join"] for task in worker.manager.tasks.values()]
    await worker.manager.close()
    assert worker.manager.tasks == {}
    assert all(p.stopped for p in worker.producers)
    assert not any(store.path.exists() for store in stores)


async def test_closing_between_a_revocation_and_an_assignment_closes_the_kept_stores(
    worker: Worker,
) -> None:
    await worker.manager.assigned(inputs_of(0, 1))
    stores = [task.stores["join"] for task in worker.manager.tasks.values()]
    await worker.manager.revoked(inputs_of(0, 1))
    assert all(store.path.exists() for store in stores)  # kept for the next assignment
    await worker.manager.close()
    assert not any(store.path.exists() for store in stores)
