"""The Kafka host's loop (streams/host.py) over in-memory partitions, without a broker:
records are folded once each, in the kernel's order, whatever the fetches deliver; a
poll that spanned a rebalance is read again, never processed twice; an input holding too
much waits, paused; offsets are committed past transaction markers; and a consumer error
ends the worker through the exactly-once exit (status 75, "restart me")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import pytest
from aiokafka.errors import UnknownError

from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event
from reef.core.kernel import record_key
from reef.core.state import KeyValueState
from reef.hosts.state_codec import load_value
from reef.settings import Settings
from reef_dev.events import inference, receipt, report
from streams import host as host_module
from streams.clients import WorkerClients
from streams.host import StreamsHost
from streams.kafka_consumer import ConsumerFailedError, KafkaConsumer
from streams.records import FetchedRecord, TopicPartition
from streams.task import TaskProducer
from tests.support.memory_kafka import MemoryConsumer, MemoryLog, MemoryProducer

SCENARIO = "loop-s"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CODEC = EventCodec()
INFERENCE, REPORTS = TopicPartition(topics.INFERENCE, 0), TopicPartition(topics.REPORTS, 0)


class Seen:
    """A processor whose state is the order it was fed, each event once or more."""

    name = "seen"
    inputs = (topics.INFERENCE, topics.REPORTS)
    output = topics.SAMPLES

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        state.set("order", [*(state.get("order") or []), event.event_id])
        return []


class _Fatal(Exception):
    pass


def ends_the_test(reason: str, exc: BaseException | None) -> NoReturn:
    raise _Fatal(reason) from exc


class Deployment:
    """A host of :class:`Seen` on partition number 0 of a :class:`MemoryLog`."""

    def __init__(self, tmp_path: Path, consumer: MemoryConsumer | None = None) -> None:
        self.log = consumer.log if consumer is not None else MemoryLog()
        self.consumer = consumer or MemoryConsumer(self.log, per_poll=3)
        self.producers: list[MemoryProducer] = []
        settings = Settings.of(state_dir=tmp_path, streams_stall_timeout_s=0)
        self.host = StreamsHost(
            settings,
            tmp_path / "data",
            processors=[Seen()],
            on_fatal=ends_the_test,
            clients=WorkerClients(self.consumer, MemoryConsumer(self.log), self._open_producer),
        )
        self.changelog = self.host.hosted[0].changelog
        self.written: list[FetchedRecord] = []

    async def _open_producer(self, n: int) -> TaskProducer:
        self.producers.append(MemoryProducer(self.log, n, [self.changelog]))
        return self.producers[-1]

    def write(self, events: list[tuple[int, Event]]) -> None:
        """Append ``(timestamp, event)``s to their topics' partition 0."""
        for timestamp, event in events:
            value, _ = CODEC.encode(event)
            tp = TopicPartition(topics.topic_for(event.type_name()), 0)
            self.written.append(self.log.append(tp, SCENARIO.encode(), value, timestamp))

    def kernel_order(self) -> list[str]:
        ordered = sorted(self.written, key=record_key)
        return [CODEC.decode(r.value or b"").event_id for r in ordered]

    def seen(self) -> list[str]:
        """The state's order as the changelog holds it (what a restore would read)."""
        records = self.log.records.get(TopicPartition(self.changelog, 0), [])
        values = [r.value for r in records if r.key == b'"order"' and r.value is not None]
        return list(load_value(values[-1])) if values else []

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The host running, partition number 0 assigned to it; stopped on leaving."""
        running = asyncio.create_task(self.host.run())
        while self.consumer.listener is None:
            await asyncio.sleep(0)
        self.consumer.assign({INFERENCE, REPORTS})
        await self.consumer.listener.assigned({INFERENCE, REPORTS})
        try:
            yield
        finally:
            self.host.stop()
            await running

    async def serve_until(self, done: Callable[[], bool]) -> None:
        async with self.serving():
            await until(done)


async def until(done: Callable[[], bool]) -> None:
    for _ in range(5000):
        if done():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the loop did not get there")


def exchanges_then_reports(count: int) -> list[tuple[int, Event]]:
    recs = [receipt(SCENARIO, i) for i in range(count)]
    exchanges: list[tuple[int, Event]] = [
        (10 * i, inference(SCENARIO, r, AT)) for i, r in enumerate(recs)
    ]
    reports: list[tuple[int, Event]] = [
        (10 * i + 5, report(SCENARIO, f"report-{i}", [r], AT)) for i, r in enumerate(recs)
    ]
    return exchanges + reports


async def test_every_record_is_folded_once_in_the_kernels_order(tmp_path: Path) -> None:
    """The reports are fetched five at a time, the exchanges one: a report fetched ahead
    of the exchanges before it waits for them."""
    consumer = MemoryConsumer(MemoryLog(), fetch_sizes={INFERENCE: 1, REPORTS: 5})
    deployment = Deployment(tmp_path, consumer)
    deployment.write(exchanges_then_reports(7))
    expected = deployment.kernel_order()
    await deployment.serve_until(lambda: len(deployment.seen()) >= len(expected))
    assert deployment.seen() == expected
    assert deployment.log.committed == {INFERENCE: 7, REPORTS: 7}
    assert all(p.stopped for p in deployment.producers)  # the stop closed the task


class RebalancingConsumer(MemoryConsumer):
    """Runs a rebalance (revoked, then the same partitions assigned) during its second
    poll, after the fetch: what that poll returns predates the assignment's seek."""

    seeks_before = 0
    committed_then: dict[TopicPartition, int]
    polled_then: set[TopicPartition]

    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]:
        polled = await super().poll(*tps, timeout_ms=timeout_ms, max_records=max_records)
        if self.polls == 2 and self.listener is not None:
            self.seeks_before = len(self.seeks)
            self.committed_then = dict(self.log.committed)
            self.polled_then = set(polled)
            await self.listener.revoked(set(self.assigned))
            await self.listener.assigned(set(self.assigned))
        return polled


async def test_a_poll_that_spanned_a_rebalance_is_read_again_not_processed(
    tmp_path: Path,
) -> None:
    consumer = RebalancingConsumer(MemoryLog(), per_poll=2)
    deployment = Deployment(tmp_path, consumer)
    deployment.write(exchanges_then_reports(6))
    expected = deployment.kernel_order()
    await deployment.serve_until(lambda: len(deployment.seen()) >= len(expected))
    assert deployment.seen() == expected  # each once: the spanning poll was not folded
    assert consumer.polled_then  # it returned records
    # the assignment's seeks to the committed offsets, then the spanning poll's partitions
    # sought back to where their tasks stood: the same offsets
    then = consumer.committed_then
    assignment = [(tp, then.get(tp, 0)) for tp in (INFERENCE, REPORTS)]
    back = [(tp, then.get(tp, 0)) for tp in consumer.polled_then]
    assert sorted(consumer.seeks[consumer.seeks_before :]) == sorted(assignment + back)


async def test_an_input_holding_too_much_waits_paused_until_the_other_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_module, "MAX_HELD_RECORDS", 4)
    deployment = Deployment(tmp_path)
    deployment.write(exchanges_then_reports(8))
    expected = deployment.kernel_order()
    deployment.consumer.withheld = {REPORTS}  # its fetch has not come back: nothing ready
    async with deployment.serving():
        await until(lambda: deployment.consumer.paused == {INFERENCE})
        polls = deployment.consumer.polls
        await until(lambda: deployment.consumer.polls >= polls + 5)
        assert deployment.seen() == []
        held = deployment.consumer.positions[INFERENCE]
        assert 4 <= held < 8  # fetching stopped once it held enough
        deployment.consumer.withheld = set()
        await until(lambda: len(deployment.seen()) >= len(expected))
    assert deployment.seen() == expected
    assert deployment.consumer.paused == set()


async def test_offsets_are_committed_past_transaction_markers(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path)
    deployment.write(exchanges_then_reports(2))
    deployment.log.skip(INFERENCE)  # the marker of the transaction that wrote them
    deployment.log.skip(REPORTS)
    await deployment.serve_until(lambda: deployment.log.committed == {INFERENCE: 3, REPORTS: 3})
    assert len(deployment.seen()) == 4


class _AbortedClient:
    """What aiokafka's consumer does when a broker dies mid-rebalance: ``getmany``
    raises the error the group coordination aborted with."""

    async def start(self) -> None:
        pass

    async def getmany(self, *tps: Any, **_: Any) -> dict[Any, Any]:
        raise UnknownError()


@pytest.fixture
def aborted(tmp_path: Path) -> Iterator[StreamsHost]:
    consumer = KafkaConsumer(_AbortedClient)
    log = MemoryLog()

    async def no_producer(n: int) -> TaskProducer:
        raise AssertionError("no task is opened")

    yield StreamsHost(
        Settings.of(state_dir=tmp_path),
        tmp_path / "data",
        on_fatal=ends_the_test,
        clients=WorkerClients(consumer, MemoryConsumer(log), no_producer),
    )


async def test_a_consumer_error_ends_the_worker_through_the_fatal_exit(
    aborted: StreamsHost,
) -> None:
    await aborted.consumer.start()
    with pytest.raises(_Fatal, match="the consumer failed") as ended:
        await aborted._loop()
    failure = ended.value.__cause__
    assert isinstance(failure, ConsumerFailedError)
    assert isinstance(failure.__cause__, UnknownError)
