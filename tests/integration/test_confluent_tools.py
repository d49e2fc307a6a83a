"""A ``wire_format: confluent`` deployment read with tools no one here wrote.

Reef writes one event of every type (the golden events) through the deployment's codec,
each to its topic; confluent-kafka's consumer with its ``AvroDeserializer`` and
``SchemaRegistryClient`` (Confluent's own client library, over librdkafka) then reads
every event topic from the beginning and must give back each event's fields, resolving
each value's schema id in the registry itself. The key topic is not an event topic (raw
32-byte data keys, no schema) and is not read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from reef.core.events import Event
from reef.core.topics import ALL_TOPICS, LOG_TOPICS, topic_for
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.services.eventstore import EventStore
from tests.support.golden import golden_events
from tests.support.wire import confluent_codec

pytestmark = pytest.mark.kafka

PARTITIONS = 3


@pytest.fixture
async def deployment(
    kafka_bootstrap: str, schema_registry_url: str
) -> AsyncIterator[tuple[str, dict[str, Event]]]:
    """A topic prefix holding one event of every type, written in the Confluent format."""
    prefix = f"cf-tools-{uuid.uuid4().hex[:8]}."
    codec = confluent_codec(schema_registry_url, prefix)
    log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, partitions=PARTITIONS)
    await log.start()
    try:
        await log.ensure_topics(list(LOG_TOPICS))
        events = golden_events()
        await EventStore(log, codec).append_all(list(events.values()))
        yield prefix, events
    finally:
        await log.close()
        await delete_prefixed_topics(kafka_bootstrap, prefix)


@pytest.fixture
def consumer(kafka_bootstrap: str) -> Iterator[Consumer]:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"cf-tools-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        yield consumer
    finally:
        consumer.close()


def test_confluent_kafka_avro_deserializer_decodes_every_topic(
    deployment: tuple[str, dict[str, Event]], consumer: Consumer, schema_registry_url: str
) -> None:
    prefix, events = deployment
    with SchemaRegistryClient({"url": schema_registry_url}) as registry:
        decoded = _read_every_topic(prefix, len(events), consumer, AvroDeserializer(registry))
    assert set(decoded) == set(events), f"read {sorted(decoded)}"
    for type_name, event in events.items():
        assert decoded[type_name] == _fields(event), type_name


def _read_every_topic(
    prefix: str, count: int, consumer: Consumer, deserializer: AvroDeserializer
) -> dict[str, dict[str, Any]]:
    """Event type -> the value of its record as the deserializer decodes it."""
    consumer.assign(
        [
            TopicPartition(prefix + topic, partition, OFFSET_BEGINNING)
            for topic in ALL_TOPICS
            for partition in range(PARTITIONS)
        ]
    )
    decoded: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    while len(decoded) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        value, topic = message.value(), message.topic()
        assert value is not None and topic is not None
        assert value[:1] == b"\x00", value[:5]  # magic byte 0 + the registry's schema id
        record = deserializer(value, SerializationContext(topic, MessageField.VALUE))
        header = dict(message.headers() or [])["reef-event-type"]
        assert isinstance(header, bytes)
        type_name = header.decode()
        assert topic == prefix + topic_for(type_name)
        assert isinstance(record, dict), record
        decoded[type_name] = record
    return decoded


def _fields(event: Event) -> dict[str, Any]:
    return {name: getattr(event, name) for name in event.__dataclass_fields__}
