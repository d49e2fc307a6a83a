"""aiokafka transactions against the local single-node Kafka (KRaft, 4.1.1).

Checks what the event-sourced pipeline relies on: a consume-transform-produce
transaction commits its output records and the consumer group's offsets
atomically, and a ``read_committed`` consumer never sees an aborted write.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord

pytestmark = pytest.mark.kafka

TIMEOUT = 60.0


async def create_topics(bootstrap: str, *names: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, num_partitions=1, replication_factor=1) for name in names]
        )
    finally:
        await admin.close()


async def read_values(
    bootstrap: str, topic: str, *, isolation_level: str, until: bytes
) -> list[bytes]:
    """All values of partition 0 from the start, up to and including ``until``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        while until not in values:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            values.extend(record.value for record in batch.get(tp, []))
        return values
    finally:
        await consumer.stop()


async def committed_offset(bootstrap: str, group_id: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        offset: int | None = await consumer.committed(tp)
        return offset
    finally:
        await consumer.stop()


async def test_transaction_commits_output_and_consumer_offsets(
    kafka_bootstrap: str, new_topic_name: Callable[..., str]
) -> None:
    source, sink = new_topic_name("source"), new_topic_name("sink")
    group_id = f"reef-test-{uuid.uuid4().hex[:12]}"
    await create_topics(kafka_bootstrap, source, sink)

    plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await plain.start()
    try:
        for i in range(3):
            await plain.send_and_wait(source, f"in-{i}".encode())
    finally:
        await plain.stop()

    # consume-transform-produce, exactly once
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"reef-test-tx-{uuid.uuid4().hex}"
    )
    source_tp = TopicPartition(source, 0)
    await consumer.start()
    await producer.start()
    try:
        consumer.assign([source_tp])
        await consumer.seek_to_beginning(source_tp)
        inputs: list[ConsumerRecord[bytes, bytes]] = []
        async with asyncio.timeout(TIMEOUT):
            while len(inputs) < 3:
                batch = await consumer.getmany(source_tp, timeout_ms=1000)
                inputs.extend(batch.get(source_tp, []))
        assert [r.value for r in inputs] == [b"in-0", b"in-1", b"in-2"]

        async with asyncio.timeout(TIMEOUT):
            await producer.begin_transaction()
            for record in inputs:
                await producer.send(sink, record.value.replace(b"in", b"out"))
            await producer.send_offsets_to_transaction({source_tp: inputs[-1].offset + 1}, group_id)
            await producer.commit_transaction()
    finally:
        await producer.stop()
        await consumer.stop()

    async with asyncio.timeout(TIMEOUT):
        out = await read_values(
            kafka_bootstrap, sink, isolation_level="read_committed", until=b"out-2"
        )
    assert out == [b"out-0", b"out-1", b"out-2"]

    # The offsets commit becomes visible with the transaction markers; allow for that.
    async with asyncio.timeout(TIMEOUT):
        while (offset := await committed_offset(kafka_bootstrap, group_id, source_tp)) != 3:
            assert offset in (None, 3)
            await asyncio.sleep(0.2)


async def test_read_committed_hides_aborted_transaction(
    kafka_bootstrap: str, new_topic_name: Callable[..., str]
) -> None:
    topic = new_topic_name("txn")
    await create_topics(kafka_bootstrap, topic)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"reef-test-tx-{uuid.uuid4().hex}"
    )
    await producer.start()
    try:
        async with asyncio.timeout(TIMEOUT):
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed-1")

            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aborted")
            await producer.abort_transaction()

            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed-2")
    finally:
        await producer.stop()

    async with asyncio.timeout(TIMEOUT):
        committed = await read_values(
            kafka_bootstrap, topic, isolation_level="read_committed", until=b"committed-2"
        )
        everything = await read_values(
            kafka_bootstrap, topic, isolation_level="read_uncommitted", until=b"committed-2"
        )
    assert committed == [b"committed-1", b"committed-2"]
    # The aborted record was really written: only the isolation level hides it.
    assert everything == [b"committed-1", b"aborted", b"committed-2"]
