"""The Faust app: one agent and one changelog-backed table per processor.

Each agent consumes its processor's co-partitioned input topics as raw bytes, decodes
with Reef's codec, runs the pure step against the table, and sends the outputs keyed by
scenario, so they land in the same partition number. ``processing_guarantee`` is
``exactly_once``: table changelog writes, outputs and input offsets commit in one Kafka
transaction per partition. Faust has open bugs around rebalances under exactly-once, so
the steps are idempotent on their own (remembered ids, deterministic output ids).

Tables live in RocksDB (``rocksdb://`` through the ``rocksdict`` binding) in the worker's
data directory (:mod:`streams.datadir`: emptied at each start, so a table is always
restored from its committed changelog), with small write buffers and block caches, so a
worker's memory does not grow with the join's state.

Two Faust gaps are closed here (found by the SIGKILL test): outputs are sent on the
input partition's transactional producer (Faust would send them outside any
transaction), and the table's changelog buffer is flushed before each event is
acknowledged (Faust's commit does not flush it, so state writes could miss the
transaction that commits their input).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import faust

from reef.codec import EventCodec
from reef.processors.catalog import processors
from reef.processors.state import Processor
from reef.settings import Settings
from reef.topics import STREAMS_APP_ID
from streams.state import TableState

logger = logging.getLogger(__name__)

APP_ID = STREAMS_APP_ID

#: per table partition (one RocksDB each): memtables and block cache, so the memory a
#: worker holds for its tables is bounded (RocksDB's defaults: 3 x 64 MB and 2 GB)
ROCKSDB_OPTIONS: Final[dict[str, int]] = {
    "write_buffer_size": 4 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 8 * 1024 * 1024,
}


def data_dir_base(settings: Settings) -> Path:
    """Where this deployment's workers keep their data directories (see streams.datadir)."""
    return settings.state_dir / "streams" / (settings.kafka_topic_prefix + STREAMS_APP_ID)


def create_app(settings: Settings, data_dir: Path) -> faust.App:
    """The worker's app; its id, groups and topics carry the deployment's topic prefix.

    ``data_dir`` holds the tables' RocksDB files: this worker's alone, and empty.
    """
    prefix = settings.kafka_topic_prefix
    options: dict[str, Any] = {}
    if settings.streams_instance_id:
        # static membership: a restarted worker gets its partitions back without waiting
        # for the session of its killed predecessor to expire (and without a rebalance)
        options["consumer_group_instance_id"] = settings.streams_instance_id
    app = faust.App(
        prefix + STREAMS_APP_ID,
        broker=f"kafka://{settings.kafka_bootstrap}",
        processing_guarantee="exactly_once",
        store="rocksdb://",
        datadir=str(data_dir),
        topic_partitions=settings.partitions,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=True,
        producer_acks=-1,
        broker_session_timeout=settings.streams_session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.streams_session_timeout_s / 3),
        **options,
    )
    codec = EventCodec()
    for processor in processors(settings):
        _host(app, processor, codec, settings.partitions, prefix)
    return app


def _host(
    app: faust.App, processor: Processor, codec: EventCodec, partitions: int, prefix: str
) -> None:
    source = app.topic(
        *(prefix + t for t in processor.inputs),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
    sink = prefix + processor.output
    app.topic(sink, key_serializer="raw", value_serializer="raw", partitions=partitions)
    table = app.Table(
        f"{processor.name}-state",
        default=None,
        partitions=partitions,
        key_type=str,
        options={"driver": "rocksdict", **ROCKSDB_OPTIONS},
    )
    state = TableState(table)

    async def run(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            message = event.message
            try:
                decoded = codec.decode(event.value)
            except Exception:
                logger.exception("%s: skipping undecodable record %s", processor.name, message.tp)
                yield None
                continue
            # Outputs go through the transactional producer of the INPUT's partition group.
            # Faust's own sink.send picks the transaction from the output topic, which this
            # worker never consumes, and falls back to a non-transactional send: outputs
            # then become visible before the input offsets commit (duplicates on a crash).
            transaction = (
                f"{app.conf.id}-{app.assignor.group_for_topic(message.topic)}-{message.partition}"
            )
            producer = app.consumer.transactions.producer
            for output in processor.step(state, decoded):
                value, headers = codec.encode(output)
                await producer.send(
                    sink,
                    output.scenario.encode(),
                    value,
                    message.partition,
                    None,
                    headers,
                    transactional_id=transaction,
                )
            # The table's changelog writes wait in a buffer that Faust's exactly-once commit
            # does not flush: hand them to the producer before this event is acknowledged,
            # so they belong to the transaction that commits its offset.
            await app.producer.buffer.flush()
            yield None

    app.agent(source, name=f"reef-{processor.name}")(run)
