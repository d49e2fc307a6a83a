"""What the Kafka host sees of Kafka: partitions, fetched records and records to send, as
Reef's own types.

The adapters (:mod:`streams.kafka_consumer`, :mod:`streams.transaction`) turn the client
library's records and partitions into these and back; every other module of the host
(the loop, the task manager, the batch, the partition buffer, the restorer) reads only
them. Partitions and fetched records are named tuples: immutable, typed, and as cheap to
build as a tuple (one is built per fetched record).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

#: one record a task sends: key, value (None: a tombstone), headers
Row = tuple[bytes, bytes | None, Sequence[tuple[str, bytes]]]


class TopicPartition(NamedTuple):
    """One partition of one topic (Kafka's name for it)."""

    topic: str
    partition: int


class FetchedRecord(NamedTuple):
    """One record a consumer fetched: where it is, when it was appended, what it holds."""

    topic: str
    partition: int
    offset: int
    #: the record's timestamp in milliseconds (the kernel's order reads it)
    timestamp_ms: int
    key: bytes | None
    #: None: a tombstone
    value: bytes | None


def source_of(record: FetchedRecord) -> TopicPartition:
    """The partition ``record`` was fetched from."""
    return TopicPartition(record.topic, record.partition)
