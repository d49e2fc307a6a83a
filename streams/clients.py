"""A worker's clients of Kafka, as the host uses them: its group member, its changelog
reader, and how a task's producer starts.

:class:`WorkerClients` is the host's one seam to the brokers: :func:`kafka_clients` makes
the real ones (:mod:`streams.kafka_consumer`, :mod:`streams.transaction`); a test hands
the host stand-ins of its own, as it would a transport to an HTTP client.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from streams.kafka_consumer import Fatal, KafkaConsumer, RebalanceListener
from streams.partition_buffer import Pausing
from streams.records import FetchedRecord, TopicPartition
from streams.restorer import ChangelogReader
from streams.task import TaskProducer
from streams.task_manager import CommittedOffsets
from streams.transaction import KafkaTaskProducer


class Started(Protocol):
    async def start(self) -> None: ...
    async def stop(self, *, leave_group: bool = False) -> None: ...


class GroupConsumer(Started, CommittedOffsets, Pausing, Protocol):
    """The calls the host makes on its member of the consumer group."""

    def subscribe(
        self, topics: Iterable[str], listener: RebalanceListener, fatal: Fatal
    ) -> None: ...
    def assignment(self) -> set[TopicPartition]: ...
    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]: ...
    async def position(self, tp: TopicPartition) -> int: ...
    def last_stable_offset(self, tp: TopicPartition) -> int | None: ...


class ChangelogConsumer(Started, ChangelogReader, Protocol):
    """The changelog reader the host starts and stops."""


@dataclass(frozen=True, slots=True)
class WorkerClients:
    consumer: GroupConsumer
    changelogs: ChangelogConsumer
    #: starts partition *n*'s transactional producer (fencing the previous owner)
    open_producer: Callable[[int], Awaitable[TaskProducer]]


@dataclass(frozen=True, slots=True)
class KafkaOptions:
    """What a worker's clients are configured with."""

    bootstrap: str
    group: str
    session_timeout_s: float
    #: static group membership (None: dynamic)
    instance_id: str | None
    #: bounds each transaction's commit (None: unbounded)
    commit_timeout_s: float | None


def kafka_clients(options: KafkaOptions, changelogs: Collection[str]) -> WorkerClients:
    """The worker's clients on the brokers; ``changelogs``: the topics whose end offsets a
    task's commit reports."""
    group = options.group

    async def open_producer(partition: int) -> TaskProducer:
        return await KafkaTaskProducer.start(
            options.bootstrap,
            group,
            partition,
            timeout_s=options.commit_timeout_s,
            changelogs=changelogs,
        )

    consumer = KafkaConsumer.group_member(
        options.bootstrap,
        group,
        client_id=f"{group}-{os.getpid()}",
        session_timeout_s=options.session_timeout_s,
        instance_id=options.instance_id,
    )
    reader = KafkaConsumer.changelog_reader(options.bootstrap, client_id=f"{group}-restore")
    return WorkerClients(consumer, reader, open_producer)
