"""Kafka and the embedded log put the same scenario in the same partition, at the same offset.

Events go through :class:`reef.services.eventstore.EventStore` (which keys them by scenario) to
both logs. KafkaLog passes no partition, so aiokafka's default partitioner chooses on
Kafka; the embedded log uses reef.log.partitioner. Each log is wrapped so the fixed
``reef.*`` topic names map to this test's own fresh topics.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypedDict

import pytest

from reef.contracts.log import read_all
from reef.core.events import EngineLoadFailed, Event, InferenceRecorded, ReportRejected
from reef.core.topics import ALL_TOPICS
from reef.log.base import EventLog, LogRecord, PendingAppend, Position
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog
from reef.log.partitioner import partition_for
from reef.services.eventstore import EventStore

pytestmark = pytest.mark.kafka


class RenamedTopics:
    """An EventLog wrapper that stores ``reef.*`` topics under per-test names."""

    def __init__(self, inner: EventLog, names: Mapping[str, str]) -> None:
        self.inner = inner
        self.names = dict(names)
        self.back = {v: k for k, v in names.items()}

    @property
    def partitions(self) -> int:
        return self.inner.partitions

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def ensure_topics(self, topics: Sequence[str]) -> None:
        await self.inner.ensure_topics([self.names[t] for t in topics])

    async def append(self, topic: str, key: bytes, value: bytes, headers: object = ()) -> Position:
        raise NotImplementedError("EventStore uses append_many")

    async def append_many(self, records: Sequence[PendingAppend]) -> list[Position]:
        renamed = [PendingAppend(self.names[r.topic], r.key, r.value, r.headers) for r in records]
        positions = await self.inner.append_many(renamed)
        return [Position(self.back[p.topic], p.partition, p.offset) for p in positions]

    async def end_offsets(self, topic: str) -> dict[int, int]:
        return await self.inner.end_offsets(self.names[topic])

    async def read(self, topic: str, **kwargs: object) -> AsyncIterator[LogRecord]:
        async for record in self.inner.read(self.names[topic], **kwargs):  # type: ignore[arg-type]
            yield record

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        return await self.inner.committed(group, self.names[topic])

    async def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        await self.inner.commit(group, self.names[topic], offsets)


def scenario_names(count: int) -> list[str]:
    rng = random.Random(7)
    names = ["default", "", "a", "ab", "abc", "abcd", "日本語", "ключ", "😀", "x" * 200]
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-_.éß日😀"
    while len(names) < count:
        names.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))))
    return names


class Envelope(TypedDict):
    """The fields every event shares."""

    event_id: str
    scenario: str
    occurred_at: datetime
    producer: str


def events_for(scenarios: Sequence[str]) -> list[Event]:
    at = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    out: list[Event] = []
    for i, scenario in enumerate(scenarios):
        envelope: Envelope = {
            "event_id": f"evt-{i}",
            "scenario": scenario,
            "occurred_at": at + timedelta(milliseconds=i),
            "producer": "partition-test",
        }
        out.append(
            InferenceRecorded(
                **envelope, dialect="openai", route="/v1/chat/completions", release_id="r",
                stream=False, status=200, complete=True, latency_ms=1.0,
                upstream_latency_ms=0.5,
            )
        )
        if i % 3 == 0:
            out.append(ReportRejected(**envelope, report_id=f"rep-{i}", reason="x"))
        if i % 5 == 0:
            out.append(
                EngineLoadFailed(**envelope, engine_id="e", release_id="r", error="e", attempt=i)
            )
    return out


def rows(records: Sequence[LogRecord]) -> list[tuple[object, ...]]:
    return sorted((r.partition, r.offset, r.key, r.value, r.headers) for r in records)


@pytest.mark.parametrize("partitions", [6, 7])
async def test_same_keys_same_partitions_on_kafka_and_embedded(
    partitions: int,
    kafka_bootstrap: str,
    new_topic_name: Callable[..., str],
    tmp_path: Path,
) -> None:
    names = {topic: new_topic_name(topic) for topic in ALL_TOPICS}
    kafka = RenamedTopics(KafkaLog(kafka_bootstrap, partitions=partitions), names)
    embedded = RenamedTopics(EmbeddedLog(tmp_path / "log.sqlite3", partitions=partitions), names)
    scenarios = scenario_names(300)
    events = events_for(scenarios)

    for log in (kafka, embedded):
        await log.start()
    try:
        for log in (kafka, embedded):
            await log.ensure_topics(list(ALL_TOPICS))
        on_kafka = await EventStore(kafka).append_all(events)
        on_embedded = await EventStore(embedded).append_all(events)

        for event, k, e in zip(events, on_kafka, on_embedded, strict=True):
            expected = partition_for(event.scenario.encode(), partitions)
            assert k.partition == e.partition == expected, event.scenario
        # same partitions, same append order per partition: the very same positions
        assert on_kafka == on_embedded
        assert len({k.partition for k in on_kafka}) == partitions

        for topic in {p.topic for p in on_kafka}:
            kafka_records = await read_all(kafka.inner, names[topic], timeout=30)
            embedded_records = await read_all(embedded.inner, names[topic])
            assert rows(kafka_records) == rows(embedded_records)
            kafka_store = EventStore(kafka)
            for record in kafka_records:
                stored = kafka_store.decode(record)
                assert stored.event is not None and stored.error is None
                assert record.key == stored.event.scenario.encode()
    finally:
        for log in (kafka, embedded):
            await log.close()
