"""Join throughput: reports joined per second by one worker, embedded runtime vs Faust on Kafka.

    .venv/bin/python bench/join_throughput.py [--reports M] [--kafka-bootstrap HOST:PORT]
                                              [--only embedded|kafka] [--no-profile]

Same workload for both hosts: M exchanges (``InferenceRecorded``, ~1 KB chat bodies) and
M reports each quoting one receipt, spread over 12 scenarios (all 6 partitions), are
appended to the log first. Then one worker starts and the clock runs until all M
``SampleJoined`` are present:

* embedded: an ``EmbeddedRuntime`` (the join, as ``reef serve`` hosts it) over a fresh
  SQLite log, started in this process; "present" = committed in the log;
* kafka: one ``reef streams`` process (Faust, exactly_once) on a fresh topic prefix;
  "present" = delivered to a read_committed consumer of ``reef.samples``. Reported from
  process start (includes start-up and partition assignment) and from the worker's
  "Ready" line (catch-up only).

Target: 5,000 reports/s per worker. A host below it is run again (M/2) under cProfile
and the top functions by own time are printed (``--no-profile`` skips this).
Without ``--kafka-bootstrap`` the local stack's single node (127.0.0.1:19092) is used,
started if needed (``reef.stack``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from reef import topics
from reef.events import Event, InferenceRecorded, ReportSubmitted
from reef.eventstore import EventStore
from reef.ids import content_hash, scenario_tag
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from reef.processors.catalog import processors
from reef.processors.embedded import EmbeddedRuntime
from reef.settings import Settings
from streams.host import READY_LINE

TARGET = 5_000
SCENARIOS = tuple(f"bench-{i}" for i in range(12))
REPO_ROOT = Path(__file__).resolve().parents[1]


# -- the workload ------------------------------------------------------------------------


def workload(reports: int) -> list[Event]:
    """M exchanges and M reports (report i quotes exchange i), exchanges first."""
    at = datetime.now(UTC).replace(microsecond=0)
    exchanges: list[Event] = []
    feedback: list[Event] = []
    for i in range(reports):
        scenario = SCENARIOS[i % len(SCENARIOS)]
        receipt = scenario_tag(scenario) + f"{i:024x}"
        question = f"question {i}: summarise the refund policy for order {i * 7919} " * 6
        answer = f"answer {i}: refunds within 30 days with the receipt; " * 6
        request = {"model": "m", "messages": [{"role": "user", "content": question}]}
        response = {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
        exchanges.append(
            InferenceRecorded(
                event_id=receipt,
                scenario=scenario,
                occurred_at=at,
                producer="bench",
                dialect="openai",
                route="/v1/chat/completions",
                release_id="rel-1",
                stream=False,
                status=200,
                complete=True,
                latency_ms=12.0,
                upstream_latency_ms=10.0,
                request_json=json.dumps(request),
                response_json=json.dumps(response),
            )
        )
        content = {"score": 1.0, "feedback": "good", "references": [receipt], "metadata": {}}
        feedback.append(
            ReportSubmitted(
                event_id=f"report-{i}",
                scenario=scenario,
                occurred_at=at,
                producer="bench",
                score=1.0,
                feedback_json='"good"',
                references=[receipt],
                metadata_json="{}",
                content_hash=content_hash(content),
            )
        )
    return exchanges + feedback


async def append_chunked(store: EventStore, events: Sequence[Event], chunk: int = 2000) -> None:
    for start in range(0, len(events), chunk):
        await store.append_all(events[start : start + chunk])


@dataclass
class Result:
    host: str
    reports: int
    seconds: float
    note: str = ""

    @property
    def per_second(self) -> float:
        return self.reports / self.seconds if self.seconds else 0.0


# -- embedded ----------------------------------------------------------------------------


async def bench_embedded(reports: int, profile: cProfile.Profile | None = None) -> Result:
    with tempfile.TemporaryDirectory(prefix="reef-bench-join-") as tmp:
        log = EmbeddedLog(Path(tmp) / "log.sqlite3")
        await log.start()
        try:
            await log.ensure_topics(list(topics.ALL_TOPICS))
            await append_chunked(EventStore(log), workload(reports))
            (join,) = [p for p in processors(Settings(state_dir=Path(tmp))) if p.name == "join"]
            runtime = EmbeddedRuntime(log, join)
            if profile is not None:
                profile.enable()
            began = time.perf_counter()
            await runtime.start()
            while sum((await log.end_offsets(topics.SAMPLES)).values()) < reports:
                if not runtime.healthy():
                    raise RuntimeError("the embedded runtime stopped")
                await asyncio.sleep(0.005)
            seconds = time.perf_counter() - began
            if profile is not None:
                profile.disable()
            await runtime.close()
        finally:
            await log.close()
    return Result("embedded runtime", reports, seconds, "start -> all samples committed")


# -- Kafka (one Faust worker) ------------------------------------------------------------


def kafka_bootstrap(given: str | None) -> str:
    if given:
        return given
    try:
        from reef.stack import kafka
        from reef.stack.paths import load_settings
    except ImportError:  # pragma: no cover - reef.stack is part of the checkout
        raise SystemExit("reef.stack is not available: pass --kafka-bootstrap") from None
    shape = kafka.up(load_settings(), "single", echo=lambda m: print(f"[stack] {m}"))
    return shape.bootstrap


def worker_argv(bootstrap: str, prefix: str, profile_to: Path | None) -> list[str]:
    reef = Path(sys.executable).with_name("reef")
    command = [str(reef)] if profile_to is None else [
        sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "reef.cli"
    ]  # fmt: skip
    return [
        *command,
        "streams",
        "--log",
        "kafka",
        "--kafka-bootstrap",
        bootstrap,
        "--kafka-topic-prefix",
        prefix,
        "--loglevel",
        "info",
    ]


async def count_samples(bootstrap: str, topic: str, expected: int) -> None:
    """Return once ``expected`` records of ``topic`` reached a read_committed consumer."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=5000,
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = 0
        while seen < expected:
            batches = await consumer.getmany(timeout_ms=100)
            seen += sum(len(messages) for messages in batches.values())
    finally:
        await consumer.stop()


async def bench_kafka(
    bootstrap: str, reports: int, profile_to: Path | None = None
) -> tuple[Result, Result]:
    prefix = f"bench-join-{uuid.uuid4().hex[:8]}-"
    log = KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-bench-join")
    await log.start()
    logs = Path(tempfile.mkdtemp(prefix="reef-bench-streams-"))
    try:
        await log.ensure_topics(list(topics.ALL_TOPICS))
        await append_chunked(EventStore(log), workload(reports))
        output = (logs / "streams.log").open("wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("REEF_")}
        began = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            *worker_argv(bootstrap, prefix, profile_to),
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=REPO_ROOT,
        )
        ready_at: list[float] = []

        async def watch() -> None:
            """Note when the worker is Ready; fail as soon as it exits."""
            while READY_LINE.encode() not in (logs / "streams.log").read_bytes():
                if process.returncode is not None:
                    break
                await asyncio.sleep(0.02)
            else:
                ready_at.append(time.perf_counter())
            await process.wait()
            raise RuntimeError(f"reef streams exited early; see {logs / 'streams.log'}")

        counting = asyncio.create_task(
            count_samples(bootstrap, prefix + topics.SAMPLES, reports), name="count"
        )
        watcher = asyncio.create_task(watch(), name="watch")
        try:
            finished, _ = await asyncio.wait(
                {counting, watcher}, timeout=600, return_when=asyncio.FIRST_COMPLETED
            )
            if counting not in finished:
                if watcher in finished:
                    watcher.result()  # raises: the worker exited
                raise TimeoutError(f"not all {reports} samples within 600 s")
            counting.result()
            done = time.perf_counter()
        finally:
            for task in (counting, watcher):
                task.cancel()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(60):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()
            output.close()
    finally:
        await log.close()
        await delete_prefixed_topics(bootstrap, prefix)
    ready = ready_at[0] if ready_at else began
    return (
        Result("faust worker (kafka)", reports, done - began, "process start -> all samples"),
        Result("faust worker (kafka)", reports, done - ready, "Ready -> all samples (catch-up)"),
    )


# -- output ------------------------------------------------------------------------------


def print_table(results: Sequence[Result]) -> None:
    print()
    print(f"{'host':22} {'reports':>8} {'seconds':>8} {'reports/s':>10} {'target':>7}  measured")
    for r in results:
        ok = "ok" if r.per_second >= TARGET else "BELOW"
        print(f"{r.host:22} {r.reports:8d} {r.seconds:8.2f} {r.per_second:10.0f} {ok:>7}  {r.note}")


def print_profile(title: str, stats: pstats.Stats, limit: int = 18) -> None:
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in raw.values())

    def cumulative(path_end: str, names: tuple[str, ...]) -> float:
        return sum(
            ct
            for (file, _, name), (_, _, _, ct, _) in raw.items()
            if file.endswith(path_end) and name in names
        )

    shares = {
        "processor steps (reef/processors/*.step)": sum(
            ct
            for (file, _, name), (_, _, _, ct, _) in raw.items()
            if "reef/processors/" in file and name == "step"
        ),
        "codec decode (Avro + CRC)": cumulative("reef/codec.py", ("decode",)),
        "codec encode": cumulative("reef/codec.py", ("encode",)),
        "waiting in epoll (idle / I/O)": cumulative(
            "", ("<method 'poll' of 'select.epoll' objects>",)
        ),
    }
    print(f"\n-- where the time goes: {title} (cProfile)")
    print(f"   profiled CPU+wait in this thread: {total:.2f} s; of which")
    for label, seconds in shares.items():
        print(f"   {label:42} {seconds:7.2f} s  {100 * seconds / total if total else 0:5.1f} %")
    text = io.StringIO()
    stats.stream = text  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    body = text.getvalue()
    start = body.find("   ncalls")
    print(f"   top {limit} functions by own time (coroutine resumptions count as calls):")
    print(body[start:].rstrip() if start >= 0 else body.rstrip())


# -- main --------------------------------------------------------------------------------


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reports", type=int, default=10_000, help="M: reports to join")
    parser.add_argument("--kafka-bootstrap", help="Kafka to use (default: the stack's node)")
    parser.add_argument("--only", choices=["embedded", "kafka"], help="bench one host only")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiling pass")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    results: list[Result] = []
    profiles: list[tuple[str, pstats.Stats]] = []
    if args.only in (None, "embedded"):
        print(f"embedded: {args.reports} reports ...", flush=True)
        result = await bench_embedded(args.reports)
        results.append(result)
        if result.per_second < TARGET and not args.no_profile:
            profile = cProfile.Profile()
            await bench_embedded(max(1, args.reports // 2), profile)
            profiles.append(("embedded runtime", pstats.Stats(profile)))
    if args.only in (None, "kafka"):
        bootstrap = kafka_bootstrap(args.kafka_bootstrap)
        print(f"kafka ({bootstrap}): {args.reports} reports ...", flush=True)
        whole, catch_up = await bench_kafka(bootstrap, args.reports)
        results += [whole, catch_up]
        if catch_up.per_second < TARGET and not args.no_profile:
            with tempfile.TemporaryDirectory(prefix="reef-bench-profile-") as tmp:
                out = Path(tmp) / "streams.prof"
                await bench_kafka(bootstrap, max(1, args.reports // 2), out)
                if out.exists():
                    profiles.append(("faust worker, main thread", pstats.Stats(str(out))))
                else:
                    print("(the profiled worker wrote no profile)")

    print_table(results)
    for title, stats in profiles:
        print_profile(title, stats)
    if args.json:
        rows = [{**asdict(r), "per_second": round(r.per_second, 1)} for r in results]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
