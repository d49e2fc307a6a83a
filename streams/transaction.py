"""One task's batch as one Kafka transaction (step 2 of the batch protocol of
:mod:`streams.batch`), in the order the protocol states:

1. ``begin_transaction``;
2. send every row to partition *n* of its topic (the outputs to their event types' topics,
   the changed keys to the processors' changelogs), in as few record batches as fit;
3. wait until the broker has every batch;
4. ``send_offsets_to_transaction``: the next input offsets, for the consumer group;
5. ``commit_transaction``, bounded by the stall timeout.

A failure anywhere propagates and nothing is committed: the worker exits, and the next
owner's ``init_transactions`` aborts what was left open.

This is the host's producer-side adapter: :class:`KafkaTaskProducer` is a task's
transactional producer on aiokafka, and no aiokafka type leaves this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Final, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from reef.core.errors import ReefError
from streams.kafka_consumer import METADATA_MAX_AGE_MS
from streams.records import Row, TopicPartition

#: the most bytes of one record batch a task's producer sends
MAX_BATCH_BYTES: Final = 1024 * 1024


class _Landed(Protocol):
    """What the producer answers for a record batch the broker has: its first offset."""

    @property
    def offset(self) -> int: ...


class CommitStalledError(ReefError):
    """``commit_transaction`` did not complete within the stall timeout."""


class KafkaTaskProducer:
    """Task *n*'s transactional producer, id ``<group>-<n>``: the same id whichever worker
    runs the task, so starting it (``init_transactions``) fences the previous owner and
    ends the transaction that owner left open."""

    def __init__(
        self,
        client: AIOKafkaProducer,
        *,
        partition: int,
        group: str,
        timeout_s: float | None,
        changelogs: Collection[str],
    ) -> None:
        self._client = client
        self._partition = partition
        self._group = group
        self._timeout_s = timeout_s
        self._changelogs = changelogs

    @classmethod
    async def start(
        cls,
        bootstrap: str,
        group: str,
        partition: int,
        *,
        timeout_s: float | None,
        changelogs: Collection[str],
    ) -> KafkaTaskProducer:
        """Start task ``partition``'s producer; ``timeout_s`` bounds each commit (None:
        unbounded); ``changelogs``: the topics whose end offsets a commit reports."""
        client = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=f"{group}-{partition}",
            transactional_id=f"{group}-{partition}",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            max_batch_size=MAX_BATCH_BYTES,
        )
        await client.start()  # init_transactions: fences the previous owner
        return cls(
            client, partition=partition, group=group, timeout_s=timeout_s, changelogs=changelogs
        )

    async def commit(
        self, rows: Mapping[str, Sequence[Row]], offsets: Mapping[TopicPartition, int]
    ) -> dict[str, int]:
        """:func:`commit_batch` on this task's partition."""
        return await commit_batch(
            self._client,
            self._partition,
            rows,
            offsets,
            self._group,
            timeout_s=self._timeout_s,
            changelogs=self._changelogs,
        )

    async def stop(self) -> None:
        await self._client.stop()


async def commit_batch(
    producer: AIOKafkaProducer,
    partition: int,
    rows: Mapping[str, Sequence[Row]],
    offsets: Mapping[TopicPartition, int],
    group: str,
    *,
    timeout_s: float | None,
    changelogs: Collection[str],
) -> dict[str, int]:
    """Steps 1-5 for the rows of each topic; per changelog topic written, the offset after
    the last record written (where the store's position moves once it applies them)."""
    await producer.begin_transaction()
    delivered: list[tuple[str, int, asyncio.Future[_Landed]]] = []
    for topic, topic_rows in rows.items():
        sent = await _send_batches(producer, topic, partition, topic_rows)
        delivered += [(topic, count, future) for count, future in sent]
    landed = await asyncio.gather(*(future for _, _, future in delivered))
    await producer.send_offsets_to_transaction(
        {KafkaTopicPartition(tp.topic, tp.partition): offset for tp, offset in offsets.items()},
        group,
    )
    try:
        await asyncio.wait_for(producer.commit_transaction(), timeout_s)
    except TimeoutError as exc:
        raise CommitStalledError(
            f"transaction commit did not complete in {timeout_s:.0f} s"
        ) from exc
    ends: dict[str, int] = {}
    for (topic, count, _), metadata in zip(delivered, landed, strict=True):
        if topic in changelogs:  # a batch's metadata names its first record's offset
            ends[topic] = max(ends.get(topic, 0), metadata.offset + count)
    return ends


async def _send_batches(
    producer: AIOKafkaProducer, topic: str, partition: int, rows: Sequence[Row]
) -> list[tuple[int, asyncio.Future[_Landed]]]:
    """Send ``rows`` to one partition in as few record batches as fit: (records in the
    batch, a future resolving to its metadata once the broker has it)."""
    delivered: list[tuple[int, asyncio.Future[_Landed]]] = []
    batch = producer.create_batch()
    for key, value, headers in rows:
        if batch.append(key=key, value=value, timestamp=None, headers=list(headers)) is None:
            count = batch.record_count()
            delivered.append((count, await producer.send_batch(batch, topic, partition=partition)))
            batch = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None, headers=list(headers)) is None:
                raise ValueError(f"a record for {topic} exceeds the producer's batch size")
    if batch.record_count():
        count = batch.record_count()
        delivered.append((count, await producer.send_batch(batch, topic, partition=partition)))
    return delivered
