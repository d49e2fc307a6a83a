"""A ``wire_format: confluent`` deployment read with tools no one here wrote.

Reef writes one event of every type (the golden events) through the deployment's codec,
each to its topic; then every event topic is read from the beginning, each value's schema
id resolved in the registry by the tool itself:

* confluent-kafka's consumer with its ``AvroDeserializer`` and ``SchemaRegistryClient``
  (Confluent's own client library, over librdkafka) must give back each event's fields;
* Kafka Connect's standalone worker (the stack's Kafka jars) with Apicurio's
  ``AvroConverter`` sinks the topics to a file with ``FileStreamSinkConnector``: one
  ``Struct{...}`` line per event, with its fields (tests/support/kafka_connect.py says
  which converter and why).

kcat is not here: Debian's kcat is built without Avro (no libserdes), so ``kcat -s
value=avro`` cannot run, and the project's setup does not install kcat at all. The key
topic is not an event topic (raw 32-byte data keys, no schema) and is not read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
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
from reef_dev.stack.paths import StackSettings
from tests.support.golden import golden_events
from tests.support.kafka_connect import (
    ensure_plugins,
    file_sink_properties,
    standalone_worker,
    wait_lines,
    worker_properties,
)
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


@pytest.mark.slow
def test_kafka_connect_file_sink_with_an_avro_converter_decodes_every_topic(
    deployment: tuple[str, dict[str, Event]],
    kafka_bootstrap: str,
    schema_registry_url: str,
    reef_stack_settings: StackSettings,
    tmp_path: Path,
) -> None:
    prefix, events = deployment
    plugins = ensure_plugins(reef_stack_settings)
    out = tmp_path / "sink.txt"
    worker = worker_properties(kafka_bootstrap, schema_registry_url, plugins, tmp_path)
    topics = [prefix + topic for topic in ALL_TOPICS]
    connector = file_sink_properties(f"{prefix}file-sink", topics, out)
    with standalone_worker(reef_stack_settings, worker, connector, tmp_path / "connect") as log:
        lines = wait_lines(out, len(events), log)
    assert len(lines) == len(events)
    by_id = {line.split(",", 1)[0].removeprefix("Struct{event_id="): line for line in lines}
    assert set(by_id) == {e.event_id for e in events.values()}
    for event in events.values():
        line = by_id[event.event_id]
        assert line.startswith("Struct{") and line.endswith("}"), line
        for name in ("scenario", "producer"):
            assert f",{name}={getattr(event, name)}," in line, (name, line)
