"""The Kafka host's consumers on aiokafka: the one module of the host that reads through it.

:class:`KafkaConsumer` puts the calls the host makes (poll, seek, pause and resume,
committed and fetch positions, offsets) behind typed methods over Reef's own
:class:`streams.records.TopicPartition` and :class:`streams.records.FetchedRecord`, so
no aiokafka type travels past it; aiokafka's errors from a poll are translated once,
into :class:`ConsumerFailedError`. The rebalance callbacks reach the host the same way
(:class:`RebalanceListener`). :class:`BrokerOffsets` asks the brokers, with clients of
its own, what the stall watchdog compares. The producer side has its own adapter,
:mod:`streams.transaction`.

A consumer is built unstarted (aiokafka's clients need a running event loop), so a host
is composed before it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, NoReturn, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError

from reef.core.errors import ReefError
from streams.records import FetchedRecord, TopicPartition

logger = logging.getLogger(__name__)

#: how old the clients' cluster metadata may get (aiokafka's default: 5 minutes). aiokafka
#: resets a partition's position (ListOffsets) against the leader its metadata names and,
#: when that broker answers NotLeaderForPartition, retries without refreshing it: after a
#: broker of three was killed, a worker's assignment waited on that loop until the
#: watchdog ended it. Fresh metadata bounds that loop to this long.
METADATA_MAX_AGE_MS: Final = 5_000
#: most records one poll of the group consumer takes
MAX_POLL_RECORDS: Final = 5000


class ConsumerFailedError(ReefError):
    """A consumer's poll failed (e.g. the group coordination aborted by a broker killed
    mid-rebalance): the worker restarts and rejoins cleanly."""


class RebalanceListener(Protocol):
    """What runs when the group takes partitions from this member or gives it some."""

    async def revoked(self, partitions: set[TopicPartition]) -> None: ...
    async def assigned(self, partitions: set[TopicPartition]) -> None: ...


#: ends the worker: (reason, the error if any)
Fatal = Callable[[str, BaseException | None], NoReturn]


class KafkaConsumer:
    """One aiokafka consumer behind typed calls (see the module doc)."""

    def __init__(self, client: Callable[[], AIOKafkaConsumer]) -> None:
        """``client``: makes the aiokafka consumer, once :meth:`start` runs in a loop."""
        self._make_client = client
        self._client: AIOKafkaConsumer | None = None

    @classmethod
    def group_member(
        cls,
        bootstrap: str,
        group: str,
        *,
        client_id: str,
        session_timeout_s: float,
        instance_id: str | None,
    ) -> KafkaConsumer:
        """The worker's member of ``group``: the range assignor (partition *n* of every
        co-partitioned input goes to the same member), committed records only, offsets
        committed by the tasks' transactions alone."""
        options: dict[str, object] = {}
        if instance_id:
            # static membership: a restarted worker gets its partitions back without waiting
            # for its killed predecessor's session to expire (and without a rebalance)
            options["group_instance_id"] = instance_id
        return cls(
            lambda: AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id=client_id,
                metadata_max_age_ms=METADATA_MAX_AGE_MS,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                partition_assignment_strategy=(RangePartitionAssignor,),
                session_timeout_ms=int(session_timeout_s * 1000),
                heartbeat_interval_ms=int(max(1.0, session_timeout_s / 3) * 1000),
                max_poll_records=MAX_POLL_RECORDS,
                fetch_max_wait_ms=100,
                **options,
            )
        )

    @classmethod
    def changelog_reader(cls, bootstrap: str, *, client_id: str) -> KafkaConsumer:
        """A consumer of no group that reads the partitions it is assigned, committed
        records only (the restorer's)."""
        return cls(
            lambda: AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                client_id=client_id,
                metadata_max_age_ms=METADATA_MAX_AGE_MS,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
        )

    @property
    def _started(self) -> AIOKafkaConsumer:
        if self._client is None:
            raise RuntimeError("the consumer is not started")
        return self._client

    async def start(self) -> None:
        self._client = self._make_client()
        await self._client.start()

    async def stop(self, *, leave_group: bool = False) -> None:
        """Close the consumer; ``leave_group``: as a departure (:func:`leave_group_on_stop`)."""
        if self._client is None:
            return
        if leave_group:
            leave_group_on_stop(self._client)
        await self._client.stop()

    def subscribe(self, topics: Iterable[str], listener: RebalanceListener, fatal: Fatal) -> None:
        """Join the group for ``topics``; a failed rebalance step ends the worker."""
        self._started.subscribe(sorted(topics), listener=_Listener(listener, fatal))

    def assignment(self) -> set[TopicPartition]:
        return {_ours(tp) for tp in self._started.assignment()}

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        self._started.assign([_theirs(tp) for tp in tps])

    async def poll(
        self, *tps: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[FetchedRecord]]:
        """The records fetched (of ``tps``, else of every partition), per partition in
        offset order."""
        try:
            polled = await self._started.getmany(
                *(_theirs(tp) for tp in tps), timeout_ms=timeout_ms, max_records=max_records
            )
        except KafkaError as exc:
            raise ConsumerFailedError(f"polling failed: {exc!r}") from exc
        return {
            TopicPartition(tp.topic, tp.partition): [
                FetchedRecord(m.topic, m.partition, m.offset, m.timestamp, m.key, m.value)
                for m in records
            ]
            for tp, records in polled.items()
        }

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._started.seek(_theirs(tp), offset)

    def pause(self, *tps: TopicPartition) -> None:
        self._started.pause(*(_theirs(tp) for tp in tps))

    def resume(self, *tps: TopicPartition) -> None:
        self._started.resume(*(_theirs(tp) for tp in tps))

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (None: never committed)."""
        offset = await self._started.committed(_theirs(tp))
        return None if offset is None else int(offset)

    async def position(self, tp: TopicPartition) -> int:
        """The offset the next fetch of ``tp`` starts at."""
        return int(await self._started.position(_theirs(tp)))

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        """The offset below which every transaction on ``tp`` ended, as last fetched
        (None: nothing fetched yet)."""
        offset = self._started.last_stable_offset(_theirs(tp))
        return None if offset is None else int(offset)

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        starts = await self._started.beginning_offsets([_theirs(tp) for tp in tps])
        return {_ours(tp): int(offset) for tp, offset in starts.items()}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        ends = await self._started.end_offsets([_theirs(tp) for tp in tps])
        return {_ours(tp): int(offset) for tp, offset in ends.items()}


def _theirs(tp: TopicPartition) -> KafkaTopicPartition:
    return KafkaTopicPartition(tp.topic, tp.partition)


def _ours(tp: KafkaTopicPartition) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition)


def leave_group_on_stop(consumer: AIOKafkaConsumer) -> None:
    """Make the consumer's close send LeaveGroup, as a static member too.

    aiokafka never sends LeaveGroup for a static member (``group_instance_id``, KIP-345:
    a member restarted under the same id should get its partitions back without a
    rebalance), so a worker stopped on purpose would hold its partitions, idle, until its
    session expired (``streams.session_timeout_s``). A graceful stop is a departure:
    clearing the instance id on the coordinator, just before ``stop()``, makes its close
    leave by member id, which the broker accepts for a static member and answers with an
    immediate rebalance. A SIGKILLed worker sends nothing: it keeps the static behaviour,
    its partitions waiting for its restart.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None:
        coordinator._group_instance_id = None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Runs a :class:`RebalanceListener`'s steps on Reef's partitions; a failure in them
    ends the worker (aiokafka would only log it, and the worker would go on without its
    partitions' tasks)."""

    def __init__(self, listener: RebalanceListener, fatal: Fatal) -> None:
        self._listener = listener
        self._fatal = fatal

    async def on_partitions_revoked(self, revoked: Iterable[KafkaTopicPartition]) -> None:
        partitions = {_ours(tp) for tp in revoked}
        await self._guarded(self._listener.revoked(partitions), "revoking partitions")

    async def on_partitions_assigned(self, assigned: Iterable[KafkaTopicPartition]) -> None:
        partitions = {_ours(tp) for tp in assigned}
        await self._guarded(self._listener.assigned(partitions), "taking up partitions")

    async def _guarded(self, step: Awaitable[None], what: str) -> None:
        try:
            await step
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fatal(f"{what} failed", exc)


class BrokerOffsets:
    """The group's committed offsets and the end offsets of committed records
    (read_committed), asked of the brokers by clients of its own: the group consumer's
    view comes from its own fetches and commits, exactly what stops when it wedges."""

    def __init__(self, bootstrap: str, group: str, answer_within_s: float) -> None:
        self._bootstrap = bootstrap
        self._group = group
        self._answer_within_s = answer_within_s
        self._clients: tuple[AIOKafkaConsumer, AIOKafkaAdminClient] | None = None

    async def of(
        self, tps: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(committed, ends); both empty when the brokers cannot answer: a broker being
        down is no stall of this worker. A partition never committed counts from 0."""
        asked = [_theirs(tp) for tp in tps]
        try:
            consumer, admin = await self._started()
            done = await asyncio.wait_for(
                admin.list_consumer_group_offsets(self._group, partitions=asked),
                self._answer_within_s,
            )
            ends = await asyncio.wait_for(consumer.end_offsets(asked), self._answer_within_s)
        except (KafkaError, TimeoutError, OSError):  # the brokers cannot answer now
            logger.warning("watchdog: offsets unavailable", exc_info=True)
            return {}, {}
        committed = {}
        for tp in asked:
            meta = done.get(tp)
            committed[_ours(tp)] = max(0, meta.offset) if meta else 0
        return committed, {_ours(tp): int(end) for tp, end in ends.items()}

    async def _started(self) -> tuple[AIOKafkaConsumer, AIOKafkaAdminClient]:
        if self._clients is None:
            client_id = f"{self._group}-watchdog"
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                isolation_level="read_committed",
                enable_auto_commit=False,
                client_id=client_id,
            )
            admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, client_id=client_id)
            try:
                await asyncio.wait_for(consumer.start(), self._answer_within_s)
                await asyncio.wait_for(admin.start(), self._answer_within_s)
            except BaseException:
                await consumer.stop()
                await admin.close()
                raise
            self._clients = (consumer, admin)
        return self._clients

    async def close(self) -> None:
        if self._clients is not None:
            consumer, admin = self._clients
            self._clients = None
            await consumer.stop()
            await admin.close()
