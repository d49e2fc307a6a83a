"""The Faust app: one agent and one changelog-backed table per processor.

Each agent consumes its processor's co-partitioned input topics as raw bytes, decodes
with Reef's codec, runs the pure step against the table, and sends the outputs keyed by
scenario, so they land in the same partition number. ``processing_guarantee`` is
``exactly_once``: table changelog writes, outputs and input offsets commit in one Kafka
transaction per partition. Faust has open bugs around rebalances under exactly-once, so
the steps are idempotent on their own (remembered ids, deterministic output ids).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import faust

from reef.codec import EventCodec
from reef.processors.catalog import processors
from reef.processors.state import Processor
from reef.settings import Settings
from reef.topics import STREAMS_APP_ID
from streams.state import TableState

logger = logging.getLogger(__name__)

APP_ID = STREAMS_APP_ID



def create_app(settings: Settings) -> faust.App:
    """The worker's app; its id, groups and topics carry the deployment's topic prefix."""
    prefix = settings.kafka_topic_prefix
    app = faust.App(
        prefix + STREAMS_APP_ID,
        broker=f"kafka://{settings.kafka_bootstrap}",
        processing_guarantee="exactly_once",
        store="memory://",
        topic_partitions=settings.partitions,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=True,
        producer_acks=-1,
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
    sink = app.topic(
        prefix + processor.output,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
    table = app.Table(f"{processor.name}-state", default=None, partitions=partitions, key_type=str)
    state = TableState(table)

    async def run(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            try:
                decoded = codec.decode(event.value)
            except Exception:
                logger.exception(
                    "%s: skipping undecodable record %s", processor.name, event.message.tp
                )
                yield None
                continue
            for output in processor.step(state, decoded):
                value, headers = codec.encode(output)
                await sink.send(
                    key=output.scenario.encode(),
                    value=value,
                    headers=headers,
                    partition=event.message.partition,
                )
            yield None

    app.agent(source, name=f"reef-{processor.name}")(run)
