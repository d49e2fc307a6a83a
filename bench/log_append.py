"""Append throughput and latency of the event log: embedded (SQLite) and Kafka, one run.

    .venv/bin/python bench/log_append.py [--events N] [--concurrency 64]
                                         [--kafka-bootstrap HOST:PORT] [--only embedded|kafka]

Every append is one ``InferenceRecorded`` event of 2-20 KB (uniformly random encoded
size, realistic JSON chat request/response bodies), encoded by the real codec and
appended durably: fsync'd group commit on the embedded log, ``acks=all`` idempotent
producer on Kafka. Two modes per log:

* sequential: one append at a time; the latency of a lone append;
* concurrent: ``--concurrency`` appends in flight; throughput under load.

Without ``--kafka-bootstrap`` the local stack's single Kafka node (127.0.0.1:19092) is
started if needed (``reef_dev.stack``). Each run writes to its own fresh topic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from reef.codec import EventCodec
from reef.core.events import InferenceRecorded, utc_now
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog
from reef.services.eventstore import EventStore

PARTITIONS = 6
MIN_BYTES, MAX_BYTES = 2_000, 20_000
WARMUP = 20

_VOCABULARY = (
    "the model should answer concisely and cite the relevant section of the policy "
    "document when the user asks about refunds shipping returns warranty or account "
    "security please summarise the previous conversation and propose three next steps "
    "with a short justification for each one including risks open questions and owners "
    "function call arguments json schema tool result retrieved context passage token"
)
_WORDS = _VOCABULARY.split()


# -- events ----------------------------------------------------------------------------


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def _chat_bodies(rng: random.Random, size: int) -> tuple[str, str]:
    """An OpenAI-style request and response whose JSON is about ``size`` bytes in all."""
    request_size = int(size * rng.uniform(0.55, 0.8))
    messages = [{"role": "system", "content": _text(rng, rng.randrange(80, 400))}]
    used = len(json.dumps(messages))
    turn = 0
    while used < request_size - 64:
        chunk = min(request_size - used - 40, rng.randrange(60, 1500))
        messages.append(
            {"role": "user" if turn % 2 == 0 else "assistant", "content": _text(rng, max(1, chunk))}
        )
        used = len(json.dumps(messages))
        turn += 1
    request = {"model": "gpt-4o-mini", "temperature": 0.2, "stream": False, "messages": messages}
    answer = _text(rng, max(16, size - len(json.dumps(request)) - 260))
    response = {
        "id": f"chatcmpl-{rng.getrandbits(64):016x}",
        "object": "chat.completion",
        "created": 1_735_689_600,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {"index": 0, "finish_reason": "stop",
             "message": {"role": "assistant", "content": answer}}
        ],
        "usage": {"prompt_tokens": used // 4, "completion_tokens": len(answer) // 4,
                  "total_tokens": (used + len(answer)) // 4},
    }
    return json.dumps(request), json.dumps(response)


def make_events(count: int, seed: int) -> list[InferenceRecorded]:
    """``count`` events, each encoding to a uniformly random size in [2 KB, 20 KB]."""
    rng = random.Random(seed)
    codec = EventCodec()
    events = []
    for i in range(count):
        target = rng.randrange(MIN_BYTES, MAX_BYTES + 1)
        body_bytes = target - 300
        for _ in range(10):  # adjust the bodies until the encoded size is in range
            event = _event(rng, i, seed, body_bytes)
            size = len(codec.encode(event)[0])
            if MIN_BYTES <= size <= MAX_BYTES and abs(size - target) < 200:
                break
            body_bytes += target - size
        events.append(event)
    return events


def _event(rng: random.Random, i: int, seed: int, body_bytes: int) -> InferenceRecorded:
    request_json, response_json = _chat_bodies(rng, max(200, body_bytes))
    return InferenceRecorded(
        event_id=f"evt-{seed}-{i}-{uuid.UUID(int=rng.getrandbits(128)).hex}",
        scenario=f"bench-scenario-{rng.randrange(64)}",
        occurred_at=utc_now(),
        producer="bench-log-append",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="rel-bench-1",
        served_release_id="rel-bench-1",
        weight_version="w-1",
        model="gpt-4o-mini",
        stream=False,
        status=200,
        complete=True,
        latency_ms=rng.uniform(200, 4000),
        upstream_latency_ms=rng.uniform(150, 3900),
        request_json=request_json,
        response_json=response_json,
        input_tokens=len(request_json) // 4,
        output_tokens=len(response_json) // 4,
        tags={"team": "bench", "env": "local"},
    )


# -- measuring ---------------------------------------------------------------------------


@dataclass
class Result:
    backend: str
    mode: str
    events: int
    seconds: float
    mean_bytes: float
    p50_ms: float
    p99_ms: float

    @property
    def per_second(self) -> float:
        return self.events / self.seconds

    @property
    def mb_per_second(self) -> float:
        return self.events * self.mean_bytes / self.seconds / 1e6


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _measure(
    append: Callable[[InferenceRecorded], Awaitable[object]],
    events: Sequence[InferenceRecorded],
    concurrency: int,
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    queue = iter(events)

    async def worker() -> None:
        for event in queue:  # the shared iterator hands each event out once
            started = time.perf_counter()
            await append(event)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


async def bench_log(
    name: str, log: EventLog, events: Sequence[InferenceRecorded], concurrency: int
) -> list[Result]:
    store = EventStore(log)
    topic = f"bench.log-append.{uuid.uuid4().hex[:12]}"
    await log.ensure_topics([topic])

    async def append(event: InferenceRecorded) -> None:
        """Encode (EventStore.prepare: the real codec) and append durably to our topic."""
        prepared = store.prepare(event)
        await log.append(topic, prepared.key, prepared.value, prepared.headers)

    mean_bytes = statistics.fmean(len(store.prepare(e).value) for e in events)
    for event in events[:WARMUP]:
        await append(event)

    results = []
    for mode, in_flight in (("sequential", 1), (f"concurrent({concurrency})", concurrency)):
        seconds, latencies = await _measure(append, events, in_flight)
        results.append(
            Result(name, mode, len(events), seconds, mean_bytes,
                   _percentile(latencies, 0.50) * 1000, _percentile(latencies, 0.99) * 1000)
        )
        print(f"  {name:8} {mode:16} done in {seconds:5.1f} s", file=sys.stderr)
    return results


def print_table(results: Sequence[Result]) -> None:
    header = (f"{'log':9} {'mode':16} {'events':>7} {'seconds':>8} {'events/s':>9} "
              f"{'MB/s':>6} {'p50 ms':>7} {'p99 ms':>7}")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r.backend:9} {r.mode:16} {r.events:7d} {r.seconds:8.2f} {r.per_second:9.0f} "
              f"{r.mb_per_second:6.1f} {r.p50_ms:7.2f} {r.p99_ms:7.2f}")


def kafka_bootstrap(given: str | None) -> str:
    if given:
        return given
    try:
        from reef_dev.stack import kafka
        from reef_dev.stack.paths import load_settings
    except ImportError:  # pragma: no cover - reef_dev.stack is part of the checkout
        raise SystemExit("reef_dev.stack is not available: pass --kafka-bootstrap") from None
    shape = kafka.up(load_settings(), "single", echo=lambda m: print(f"[stack] {m}",
                                                                      file=sys.stderr))
    return shape.bootstrap


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=4000, help="events per log and mode")
    parser.add_argument("--concurrency", type=int, default=64, help="appends in flight")
    parser.add_argument("--kafka-bootstrap", help="Kafka to use (default: the stack's node)")
    parser.add_argument("--only", choices=["embedded", "kafka"], help="bench one log only")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    events = make_events(args.events, args.seed)
    codec = EventCodec()
    sizes = [len(codec.encode(e)[0]) for e in events]
    print(f"{len(events)} InferenceRecorded events of {min(sizes)}-{max(sizes)} bytes encoded",
          file=sys.stderr)
    results: list[Result] = []
    if args.only in (None, "embedded"):
        with tempfile.TemporaryDirectory(prefix="reef-bench-") as tmp:
            log = EmbeddedLog(Path(tmp) / "log.sqlite3", partitions=PARTITIONS)
            await log.start()
            try:
                results += await bench_log("embedded", log, events, args.concurrency)
            finally:
                await log.close()
    if args.only in (None, "kafka"):
        bootstrap = kafka_bootstrap(args.kafka_bootstrap)
        log = KafkaLog(bootstrap, partitions=PARTITIONS, client_id="reef-bench")
        await log.start()
        try:
            results += await bench_log("kafka", log, events, args.concurrency)
        finally:
            await log.close()

    mean_kb = statistics.fmean(r.mean_bytes for r in results) / 1000
    print(f"\nappend = encode + durable append; mean encoded event {mean_kb:.1f} KB; "
          f"kafka: single node, acks=all, lz4, linger 0")
    print_table(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
