"""A Kafka task: partition number *n* of every input topic, with its producer and stores.

A worker runs one task per partition number it is assigned (:mod:`streams.task_manager`
opens and closes them). A task's records are processed in transactions of its own
producer (:mod:`streams.batch`), and its stores hold partition *n* of each processor's
changelog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from reef.core.kernel import OrderKey, TopicOrder
from reef.core.state import Processor
from streams.changelog import changelog_topic
from streams.partition_buffer import PartitionBuffer
from streams.records import FetchedRecord, Row, TopicPartition, source_of
from streams.store import PartitionStore

#: a task's fetched records not processed yet, per input partition
TaskBuffer = PartitionBuffer[TopicPartition, FetchedRecord]


@dataclass(frozen=True, slots=True)
class Hosted:
    """A processor with its full (prefixed) topic names."""

    processor: Processor
    inputs: tuple[str, ...]
    changelog: str


def hosted_processors(processors: Iterable[Processor], prefix: str, group: str) -> list[Hosted]:
    """Each processor with its input topics under ``prefix`` and its changelog in ``group``."""
    return [
        Hosted(p, tuple(prefix + t for t in p.inputs), changelog_topic(group, p.name))
        for p in processors
    ]


class TaskProducer(Protocol):
    """A task's transactional producer (:class:`streams.transaction.KafkaTaskProducer`)."""

    async def commit(
        self, rows: Mapping[str, Sequence[Row]], offsets: Mapping[TopicPartition, int]
    ) -> dict[str, int]:
        """Send ``rows`` per topic and the next input ``offsets`` in one transaction; per
        changelog topic written, the offset after the last record written."""
        ...

    async def stop(self) -> None: ...


@dataclass(slots=True)
class Task:
    """Partition ``n`` of every input topic: its producer and its stores."""

    partition: int
    producer: TaskProducer
    stores: dict[str, PartitionStore]
    inputs: frozenset[TopicPartition]
    #: records fetched and not processed yet, per input partition, in offset order
    buffer: TaskBuffer
    #: input offsets this task committed last (next to read)
    committed: dict[TopicPartition, int] = field(default_factory=dict)


def task_buffer(inputs: Iterable[TopicPartition], order: TopicOrder) -> TaskBuffer:
    """An empty buffer over ``inputs`` that hands records out in the kernel's ``order``."""

    def key(record: FetchedRecord) -> OrderKey:
        return order.key(record.topic, record.timestamp_ms, record.offset)

    return PartitionBuffer(inputs, source_of, key)
