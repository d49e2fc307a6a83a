"""The Kafka host's consumer adapter (streams/kafka_consumer.py) over a stand-in for
aiokafka's consumer that checks its arguments as aiokafka does: aiokafka's records come
out as Reef's typed records keyed by Reef's partitions, Reef's partitions go in as
aiokafka's, a poll's KafkaError is translated once, a failed rebalance step ends the
worker, and a graceful stop leaves the group as a static member too."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest
from aiokafka import ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.errors import UnknownError
from aiokafka.structs import ConsumerRecord

from streams.kafka_consumer import ConsumerFailedError, KafkaConsumer, leave_group_on_stop
from streams.records import FetchedRecord, TopicPartition

A, B = TopicPartition("t.inference", 0), TopicPartition("t.reports", 3)


def theirs(*tps: Any) -> None:
    """aiokafka's check of a partition argument (pause, resume, getmany, offsets...)."""
    if not all(isinstance(tp, KafkaTopicPartition) for tp in tps):
        raise TypeError("partitions must be TopicPartition instances")


class Coordinator:
    _group_instance_id: str | None = "worker-1"


class AioConsumer:
    """aiokafka's consumer as far as the adapter calls it."""

    def __init__(self) -> None:
        self.polled: dict[Any, list[Any]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.listener: Any = None
        self.failure: Exception | None = None
        self._coordinator = Coordinator()
        self.stopped = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def getmany(self, *tps: Any, timeout_ms: int, max_records: int | None) -> Any:
        theirs(*tps)
        if self.failure is not None:
            raise self.failure
        return self.polled

    def subscribe(self, topics: list[str], listener: Any) -> None:
        assert isinstance(listener, ConsumerRebalanceListener)
        self.listener = listener

    def assignment(self) -> set[Any]:
        return {KafkaTopicPartition(*A), KafkaTopicPartition(*B)}

    def seek(self, tp: Any, offset: int) -> None:
        theirs(tp)
        self.calls.append(("seek", (tp, offset)))

    def pause(self, *tps: Any) -> None:
        theirs(*tps)
        self.calls.append(("pause", tps))

    def resume(self, *tps: Any) -> None:
        theirs(*tps)
        self.calls.append(("resume", tps))

    async def committed(self, tp: Any) -> int | None:
        theirs(tp)
        return 7 if tp == A else None

    async def position(self, tp: Any) -> int:
        theirs(tp)
        return 9

    def last_stable_offset(self, tp: Any) -> int | None:
        theirs(tp)
        return 11

    async def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
        theirs(*tps)
        return dict.fromkeys(tps, 2)

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        theirs(*tps)
        return dict.fromkeys(tps, 12)


def record(tp: TopicPartition, offset: int, value: bytes | None) -> Any:
    return ConsumerRecord(
        tp.topic, tp.partition, offset, 1000 + offset, 0, b"k", value, None, 1, 1, ()
    )


@pytest.fixture
async def started() -> tuple[KafkaConsumer, AioConsumer]:
    client = AioConsumer()
    consumer = KafkaConsumer(lambda: client)
    await consumer.start()
    return consumer, client


async def test_a_poll_hands_out_reefs_records_keyed_by_reefs_partitions(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    client.polled = {
        KafkaTopicPartition(*A): [record(A, 4, b"v4"), record(A, 5, None)],
        KafkaTopicPartition(*B): [record(B, 0, b"v0")],
    }
    polled = await consumer.poll(A, B, timeout_ms=10)
    assert polled == {
        A: [FetchedRecord(*A, 4, 1004, b"k", b"v4"), FetchedRecord(*A, 5, 1005, b"k", None)],
        B: [FetchedRecord(*B, 0, 1000, b"k", b"v0")],
    }
    assert all(type(tp) is TopicPartition for tp in polled)
    assert all(type(r) is FetchedRecord for records in polled.values() for r in records)


async def test_partitions_reach_aiokafka_as_its_own_and_come_back_as_reefs(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    consumer.seek(A, 3)
    consumer.pause(A, B)
    consumer.resume(B)
    assert [name for name, _ in client.calls] == ["seek", "pause", "resume"]
    assert (await consumer.committed(A), await consumer.committed(B)) == (7, None)
    assert await consumer.position(A) == 9 and consumer.last_stable_offset(B) == 11
    assert await consumer.beginning_offsets([A, B]) == {A: 2, B: 2}
    ends = await consumer.end_offsets([A])
    assert ends == {A: 12} and all(type(tp) is TopicPartition for tp in ends)
    assignment = consumer.assignment()
    assert assignment == {A, B} and all(type(tp) is TopicPartition for tp in assignment)


async def test_a_kafka_error_from_a_poll_is_a_consumer_failure(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    client.failure = UnknownError()
    with pytest.raises(ConsumerFailedError) as failed:
        await consumer.poll(timeout_ms=10)
    assert isinstance(failed.value.__cause__, UnknownError)


class _Fatal(Exception):
    pass


class Steps:
    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.seen: list[tuple[str, set[TopicPartition]]] = []

    async def revoked(self, partitions: set[TopicPartition]) -> None:
        self.seen.append(("revoked", partitions))

    async def assigned(self, partitions: set[TopicPartition]) -> None:
        self.seen.append(("assigned", partitions))
        if self.failure is not None:
            raise self.failure


def ends(reason: str, exc: BaseException | None) -> NoReturn:
    raise _Fatal(reason) from exc


async def test_the_rebalance_steps_get_reefs_partitions(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    steps = Steps()
    consumer.subscribe(["t.reports", "t.inference"], steps, ends)
    await client.listener.on_partitions_revoked([KafkaTopicPartition(*A)])
    await client.listener.on_partitions_assigned({KafkaTopicPartition(*A), KafkaTopicPartition(*B)})
    assert steps.seen == [("revoked", {A}), ("assigned", {A, B})]
    assert all(type(tp) is TopicPartition for _, tps in steps.seen for tp in tps)


async def test_a_failed_rebalance_step_ends_the_worker(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    consumer.subscribe(["t.inference"], Steps(RuntimeError("restore failed")), ends)
    with pytest.raises(_Fatal, match="taking up partitions failed") as ended:
        await client.listener.on_partitions_assigned([KafkaTopicPartition(*A)])
    assert isinstance(ended.value.__cause__, RuntimeError)


async def test_a_graceful_stop_leaves_the_group_as_a_static_member_too(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    await consumer.stop(leave_group=True)
    assert client.stopped and client._coordinator._group_instance_id is None


async def test_a_stop_that_is_no_departure_keeps_the_static_membership(
    started: tuple[KafkaConsumer, AioConsumer],
) -> None:
    consumer, client = started
    await consumer.stop()
    assert client.stopped and client._coordinator._group_instance_id == "worker-1"
    leave_group_on_stop(client)
    assert client._coordinator._group_instance_id is None
