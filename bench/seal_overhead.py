"""What sealing costs a recorded exchange: the same appends with and without a key ring.

    .venv/bin/python bench/seal_overhead.py [--events 400] [--kafka-bootstrap HOST:PORT]

Each append is one ``InferenceRecorded`` of 2-20 KB (``bench/log_append.py``'s realistic
bodies) through :class:`reef.services.eventstore.EventStore`, one at a time (the latency a proxied
request waits for), on the embedded log and on Kafka (own topic prefix). "plain" is a
store without a key ring; "sealed" seals the bodies under a fresh AES-256-GCM data key
and appends the key in the same batch (a row of the key table / a record on
``reef.keys``). The two variants alternate in blocks of 20 so machine load hits both
alike. Also printed: the cost of sealing alone (no I/O), per event.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.log_append import make_events
from reef.core.events import InferenceRecorded
from reef.core.topics import KEYS, LOG_TOPICS, key_topic_configs
from reef.crypto import new_data_key
from reef.crypto.bodies import seal_exchange
from reef.crypto.rings import open_keyring
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog
from reef.services.eventstore import EventStore

BLOCK = 20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(log: EventLog, events: list[InferenceRecorded]) -> dict[str, list[float]]:
    await log.ensure_topics(list(LOG_TOPICS))
    ring = open_keyring(log)
    await ring.start()
    stores = {"plain": EventStore(log), "sealed": EventStore(log, keys=ring)}
    out: dict[str, list[float]] = {"plain": [], "sealed": []}
    try:
        for start in range(0, len(events), BLOCK):
            name = "plain" if (start // BLOCK) % 2 == 0 else "sealed"
            for event in events[start : start + BLOCK]:
                began = time.perf_counter()
                await stores[name].append(event)
                out[name].append((time.perf_counter() - began) * 1000)
    finally:
        await ring.close()
    return out


def seal_cost(events: list[InferenceRecorded]) -> float:
    began = time.perf_counter()
    for event in events:
        seal_exchange(event, new_data_key())
    return (time.perf_counter() - began) / len(events) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--kafka-bootstrap", default="127.0.0.1:19092")
    args = parser.parse_args()
    events = make_events(args.events, seed=7)
    print(f"sealing alone: {seal_cost(events):.1f} µs per event (2-20 KB bodies)")
    print(f"{'log':10} {'variant':8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        logs: dict[str, EventLog] = {"embedded": EmbeddedLog(Path(tmp) / "log.sqlite3")}
        if args.kafka_bootstrap:
            prefix = f"bench-seal-{uuid.uuid4().hex[:8]}."
            logs["kafka"] = KafkaLog(
                args.kafka_bootstrap,
                topic_prefix=prefix,
                topic_configs={KEYS: key_topic_configs(60_000)},
            )
        for name, log in logs.items():
            await log.start()
            try:
                found = await measure(log, events)
            finally:
                await log.close()
            for variant, values in found.items():
                print(
                    f"{name:10} {variant:8} {statistics.median(values):8.2f} "
                    f"{pct(values, 0.99):8.2f} {statistics.fmean(values):8.2f}"
                )


if __name__ == "__main__":
    asyncio.run(main())
