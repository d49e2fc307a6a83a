"""One task's batch as one Kafka transaction (step 2 of the batch protocol of
:mod:`streams.host`), in the order the protocol states:

1. ``begin_transaction``;
2. send every row to partition *n* of its topic (the outputs to their event types' topics,
   the changed keys to the processors' changelogs), in as few record batches as fit;
3. wait until the broker has every batch;
4. ``send_offsets_to_transaction``: the next input offsets, for the consumer group;
5. ``commit_transaction``, bounded by the stall timeout.

A failure anywhere propagates and nothing is committed: the worker exits, and the next
owner's ``init_transactions`` aborts what was left open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from reef.core.errors import ReefError

#: one record to send: key, value (None: a tombstone), headers
Row = tuple[bytes, bytes | None, Sequence[tuple[str, bytes]]]


class CommitStalledError(ReefError):
    """``commit_transaction`` did not complete within the stall timeout."""


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
    delivered: list[tuple[str, int, asyncio.Future[Any]]] = []
    for topic, topic_rows in rows.items():
        sent = await _send_batches(producer, topic, partition, topic_rows)
        delivered += [(topic, count, future) for count, future in sent]
    landed = await asyncio.gather(*(future for _, _, future in delivered))
    await producer.send_offsets_to_transaction(dict(offsets), group)
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
) -> list[tuple[int, asyncio.Future[Any]]]:
    """Send ``rows`` to one partition in as few record batches as fit: (records in the
    batch, a future resolving to its metadata once the broker has it)."""
    delivered: list[tuple[int, asyncio.Future[Any]]] = []
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
