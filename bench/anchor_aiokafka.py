"""Anchor B of bench/join_throughput.py: the aiokafka exactly-once ceiling, no state.

    .venv/bin/python bench/anchor_aiokafka.py --bootstrap HOST:PORT --group G \
        --input T [--input T ...] --output T

The transactional consume-transform-produce loop of ``streams/host.py`` with the work
taken out: one consumer group member (range assignor, read_committed, the host's poll
size and fetch wait), one transactional producer per partition number (the host's
producer settings), and per poll, per partition number, one transaction carrying a copy
of each record (key, value, headers) to partition *n* of the output topic and the next
input offsets (records appended to record batches, ``send_batch``, as the host sends).
No decode, no state, no changelog: what any Python host on aiokafka can
at best reach on this machine and broker.

Prints ``anchor: ready`` (flushed) once the first assignment's producers are started and
the inputs sought to the committed offsets; stops on SIGTERM after the batch in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections import defaultdict
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

READY = "anchor: ready"
MAX_POLL_RECORDS = 5000  # streams.kafka_consumer.MAX_POLL_RECORDS


class Ceiling(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, bootstrap: str, group: str, inputs: list[str], output: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.inputs = inputs
        self.output = output
        self.producers: dict[int, AIOKafkaProducer] = {}
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.ready = False
        self.copied = 0
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"{group}-{os.getpid()}",
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            max_poll_records=MAX_POLL_RECORDS,
            fetch_max_wait_ms=100,
        )

    async def run(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe(self.inputs, listener=self)
        try:
            while not self.stopping.is_set():
                polled = await self.consumer.getmany(timeout_ms=200)
                if not polled:
                    continue
                async with self.lock:
                    by_number: dict[int, list[Any]] = defaultdict(list)
                    for tp, messages in polled.items():
                        if tp.partition in self.producers:
                            by_number[tp.partition].extend(messages)
                    await asyncio.gather(
                        *(self._copy(n, messages) for n, messages in by_number.items())
                    )
        finally:
            async with self.lock:
                await self._close()
            await self.consumer.stop()
            print(f"anchor: copied={self.copied}", flush=True)

    async def _copy(self, n: int, messages: list[Any]) -> None:
        producer = self.producers[n]
        offsets: dict[TopicPartition, int] = {}
        await producer.begin_transaction()
        sent = []
        batch = producer.create_batch()
        for m in messages:
            offsets[TopicPartition(m.topic, m.partition)] = m.offset + 1
            headers = list(m.headers)
            if batch.append(key=m.key, value=m.value, timestamp=None, headers=headers) is None:
                sent.append(await producer.send_batch(batch, self.output, partition=n))
                batch = producer.create_batch()
                batch.append(key=m.key, value=m.value, timestamp=None, headers=headers)
        if batch.record_count():
            sent.append(await producer.send_batch(batch, self.output, partition=n))
        await asyncio.gather(*sent)
        await producer.send_offsets_to_transaction(offsets, self.group)
        await producer.commit_transaction()
        self.copied += len(messages)

    async def _close(self) -> None:
        producers, self.producers = list(self.producers.values()), {}
        await asyncio.gather(*(p.stop() for p in producers))

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.lock:
            await self._close()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        async with self.lock:
            await self._close()
            numbers = sorted({tp.partition for tp in assigned})
            producers = {
                n: AIOKafkaProducer(
                    bootstrap_servers=self.bootstrap,
                    client_id=f"{self.group}-{n}",
                    transactional_id=f"{self.group}-{n}",
                    acks="all",
                    enable_idempotence=True,
                    linger_ms=2,
                    max_batch_size=1024 * 1024,
                )
                for n in numbers
            }
            await asyncio.gather(*(p.start() for p in producers.values()))
            for tp in assigned:
                offset = await self.consumer.committed(tp)
                if offset is None:
                    await self.consumer.seek_to_beginning(tp)
                else:
                    self.consumer.seek(tp, offset)
            self.producers = producers
            if numbers and not self.ready:
                self.ready = True
                print(READY, flush=True)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--input", action="append", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    ceiling = Ceiling(args.bootstrap, args.group, args.input, args.output)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, ceiling.stopping.set)
    await ceiling.run()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
