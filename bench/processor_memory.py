"""Processor memory: RSS of the embedded join over N recorded exchanges, old state vs new.

    .venv/bin/python bench/processor_memory.py [--exchanges N] [--body-kb K]
                                               [--baseline REV] [--cache-mb MB ...]

Workload: N exchanges (``InferenceRecorded``, request and response bodies of ~K/2 KB
each, so ~K KB per exchange) each followed by a report quoting it, over 12 scenarios,
appended once to an embedded log (a template file, copied for each variant).

Each variant runs in a fresh child process on its own copy of the log: the join's
``EmbeddedRuntime`` as ``reef streams --log embedded`` hosts it processes every record,
then another child starts a runtime on the same (now full) state, as after a restart.
RSS is read in the first child at start (log open, nothing processed), every 0.1 s while
processing, and after processing (runtime closed, ``gc.collect()``), and in the second
child after the runtime's start-up; peak is the first child's ``ru_maxrss``.

Variants, measured in the same run:

* ``baseline``: the tree at ``--baseline`` (default: the commit before the SQLite-backed
  state was added, i.e. the host that loads the whole ``processor_state`` table into a
  dict and keeps every written value in memory), exported with ``git archive``;
* ``bounded``: this tree's host (state read on demand, bounded LRU cache), at its default
  cache budget and at each ``--cache-mb`` given.

With ``--kafka`` (optionally ``--kafka-bootstrap``; default: the local stack's single
node) the same workload also goes to a fresh topic prefix per tree, where one ``reef
streams`` worker of this tree (RocksDB stores) processes it (the Kafka rows measure this
tree only), fed in steps of 500 exchanges + reports, each appended
once the previous step's samples are committed (read_committed): no backlog for the
worker to buffer, as in a soak. Its RSS is read when it is Ready and after each step;
the topics are deleted after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reef.hosts import READY_LINE

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from reef.core import topics  # noqa: E402
from reef.core.events import Event  # noqa: E402
from reef.log.embedded import EmbeddedLog  # noqa: E402
from reef.log.kafka import KafkaLog  # noqa: E402
from reef.services.eventstore import EventStore  # noqa: E402
from reef_dev.events import inference, receipt, report  # noqa: E402

SCENARIOS = tuple(f"mem-{i}" for i in range(12))
MB = 1024 * 1024

#: runs in the child, with the variant's tree first on sys.path
CHILD = r"""
import asyncio, gc, json, resource, sys, time
from pathlib import Path

import psutil

from reef.core import topics
from reef.log.embedded import EmbeddedLog
from reef.catalog import processors
from reef.hosts.embedded import EmbeddedRuntime
from reef.settings import Settings

path, cache_bytes, phase = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
MB = 1024 * 1024


def rss() -> float:
    return psutil.Process().memory_info().rss / MB


async def runtime_for(log):
    (join,) = [p for p in processors(Settings.of(state_dir=path.parent)) if p.name == "join"]
    kwargs = {"cache_bytes": cache_bytes} if cache_bytes > 0 else {}
    return EmbeddedRuntime(log, join, **kwargs)


async def drain(runtime, expected, trace):
    while runtime.processed < expected:
        if not runtime.healthy():
            raise SystemExit("the runtime stopped")
        trace.append((runtime.processed, rss()))
        await asyncio.sleep(0.1)


async def main() -> None:
    log = EmbeddedLog(path)
    await log.start()
    expected = 0
    for topic in (topics.INFERENCE, topics.REPORTS):
        expected += sum((await log.end_offsets(topic)).values())
    gc.collect()
    out = {"rss_start": rss()}
    runtime = await runtime_for(log)
    began = time.perf_counter()
    await runtime.start()
    if phase == "restart":  # a fresh process on the full state: what does start-up hold?
        out["start_seconds"] = time.perf_counter() - began
        await asyncio.sleep(0.2)
        gc.collect()
        out["rss_restarted"] = rss()
        await runtime.close()
        await log.close()
        print("RESULT " + json.dumps(out), flush=True)
        return
    trace = []
    await drain(runtime, expected, trace)
    out["seconds"] = time.perf_counter() - began
    out["trace"] = trace
    out["rss_processed"] = rss()
    await runtime.close()
    del runtime
    gc.collect()
    out["rss_processed_gc"] = rss()
    out["samples"] = sum((await log.end_offsets(topics.SAMPLES)).values())
    await log.close()
    out["rss_peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out), flush=True)


asyncio.run(main())
"""


# -- the workload ------------------------------------------------------------------------


def workload(exchanges: int, body_kb: float) -> list[Event]:
    """Exchange i then its report, i = 0..N-1 (as traffic arrives: a report follows)."""
    at = datetime.now(UTC).replace(microsecond=0)
    half = int(body_kb * 1024 / 2)
    events: list[Event] = []
    for i in range(exchanges):
        scenario = SCENARIOS[i % len(SCENARIOS)]
        rec = receipt(scenario, i)
        question = (f"q{i} " + f"order {i * 7919} refund policy, receipt {i}; " * 200)[:half]
        answer = (f"a{i} " + f"refunds within 30 days for order {i}; " * 200)[:half]
        request = {"model": "m", "messages": [{"role": "user", "content": question}]}
        response = {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
        moment = at + timedelta(milliseconds=i)
        events.append(
            inference(
                scenario,
                rec,
                moment,
                release="rel-1",
                request=request,
                response=response,
                producer="bench",
                latency_ms=12.0,
                upstream_latency_ms=10.0,
            )
        )
        events.append(report(scenario, f"report-{i}", [rec], moment, producer="bench"))
    return events


async def build_log(path: Path, exchanges: int, body_kb: float) -> None:
    log = EmbeddedLog(path)
    await log.start()
    try:
        await log.ensure_topics(list(topics.ALL_TOPICS))
        store = EventStore(log)
        events = workload(exchanges, body_kb)
        for start in range(0, len(events), 2000):
            await store.append_all(events[start : start + 2000])
    finally:
        await log.close()
    with sqlite3.connect(path) as db:  # everything into the main file: one file to copy
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# -- variants ----------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    tree: Path
    cache_bytes: int  # 0: the tree's default (the baseline has no cache)


@dataclass
class Measured:
    variant: Variant
    figures: dict[str, float]
    trace: list[tuple[int, float]]  # (input records processed, RSS MB) while processing

    def slope_kb(self) -> float:
        """KB of RSS per input record over the second half of processing (least squares)."""
        return slope_kb(self.trace)


def slope_kb(trace: Sequence[tuple[int, float]]) -> float:
    """KB of RSS per unit of x over the second half of ``(x, RSS MB)`` (least squares)."""
    total = trace[-1][0] if trace else 0
    points = [(x, y) for x, y in trace if x >= total / 2]
    if len(points) < 3:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return 1024 * sxy / sxx if sxx else float("nan")


def baseline_rev() -> str:
    """The commit before the one that added the SQLite-backed state (else HEAD)."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "reef/hosts/sqlite_state.py"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    rev = f"{added[-1]}^" if added else "HEAD"
    return subprocess.run(
        ["git", "rev-parse", rev], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def export_tree(rev: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_variant(variant: Variant, template: Path, work: Path) -> Measured:
    copy = work / f"{variant.name}.sqlite3"
    shutil.copyfile(template, copy)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REEF_")}
    env["PYTHONPATH"] = str(variant.tree)
    figures: dict[str, Any] = {}
    try:
        for phase in ("process", "restart"):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(copy), str(variant.cache_bytes), phase],
                cwd=variant.tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode != 0 or not lines:
                raise SystemExit(
                    f"{variant.name} ({phase}) failed ({done.returncode}):\n{done.stderr[-4000:]}"
                )
            result = json.loads(lines[-1].removeprefix("RESULT "))
            if phase == "restart":
                result = {f"restart_{k}": v for k, v in result.items()}
            figures.update(result)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    trace = [(int(x), float(y)) for x, y in figures.pop("trace")]
    return Measured(variant, figures, trace)


# -- Kafka: this tree's stream worker ----------------------------------------------------


async def run_kafka_variant(
    name: str, tree: Path, bootstrap: str, events: Sequence[Event], work: Path
) -> tuple[dict[str, float], list[tuple[int, float]]]:
    """Feed the worker in steps of 500 exchanges (+ reports), each once the previous one's
    samples are committed: the worker never has a backlog to buffer, as in a soak."""
    import psutil

    from reef.log.kafka import delete_prefixed_topics as delete_topics

    prefix = f"bench-mem-{uuid.uuid4().hex[:8]}-"
    log = KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-bench-memory")
    await log.start()
    here = work / prefix
    here.mkdir()
    output = (here / "streams.log").open("wb")
    process: asyncio.subprocess.Process | None = None
    counted = [0]
    counter: asyncio.Task[None] | None = None
    try:
        await log.ensure_topics(list(topics.ALL_TOPICS))
        env = {k: v for k, v in os.environ.items() if not k.startswith("REEF_")}
        env["PYTHONPATH"] = str(tree)
        argv = ["-m", "reef.cli", "streams", "--log", "kafka", "--kafka-bootstrap", bootstrap]
        argv += ["--kafka-topic-prefix", prefix, "--state-dir", str(here / "state")]
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=output, stderr=subprocess.STDOUT, cwd=here, env=env
        )
        worker = psutil.Process(process.pid)
        store = EventStore(log)
        trace: list[tuple[int, float]] = []
        async with asyncio.timeout(1800):
            while READY_LINE.encode() not in (here / "streams.log").read_bytes():
                if process.returncode is not None:
                    raise SystemExit(f"{name}: reef streams exited; see {here / 'streams.log'}")
                await asyncio.sleep(0.05)
            ready = worker.memory_info().rss / MB
            counter = asyncio.create_task(_count(bootstrap, prefix + topics.SAMPLES, counted))
            began = time.perf_counter()
            step = 1000  # events: 500 exchanges and their reports
            for start in range(0, len(events), step):
                chunk = events[start : start + step]
                await store.append_all(chunk)
                goal = (start + len(chunk)) // 2
                while counted[0] < goal:
                    if process.returncode is not None or counter.done():
                        raise SystemExit(f"{name}: stopped; see {here / 'streams.log'}")
                    await asyncio.sleep(0.05)
                trace.append((goal, worker.memory_info().rss / MB))
        seconds = time.perf_counter() - began
        peak = max(rss for _, rss in trace)
        end = trace[-1][1]
        figures = {"rss_ready": ready, "rss_done": end, "rss_peak": peak, "seconds": seconds}
        return figures, trace
    finally:
        if counter is not None:
            counter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await counter
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(60):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        output.close()
        await log.close()
        await delete_topics(bootstrap, prefix)


async def _count(bootstrap: str, topic: str, counted: list[int]) -> None:
    """Count the records of ``topic`` a read_committed consumer sees, into ``counted[0]``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        while not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while True:
            batches = await consumer.getmany(timeout_ms=100)
            counted[0] += sum(len(messages) for messages in batches.values())
    finally:
        await consumer.stop()


def print_kafka_table(results: Sequence[tuple[str, dict[str, float]]], exchanges: int) -> None:
    print(
        f"\n{'stream worker':32} {'s':>6} {'exch/s':>7} {'RSS Ready':>9} {'done':>9} "
        f"{'growth':>7} {'KB/exch':>7} {'slope':>6} {'peak':>7}"
    )
    for name, f in results:
        growth = f["rss_done"] - f["rss_ready"]
        print(
            f"{name:32} {f['seconds']:6.1f} {exchanges / f['seconds']:7.0f} "
            f"{f['rss_ready']:9.1f} {f['rss_done']:9.1f} {growth:+7.1f} "
            f"{growth * 1024 / exchanges:7.2f} {f['slope_kb']:6.2f} {f['rss_peak']:7.1f}"
        )
    print(
        "MB of RSS of the worker: when Ready, after the last step's samples, peak after a"
        " step; slope: KB per exchange over the second half (least squares)."
    )


# -- output ------------------------------------------------------------------------------


def print_table(results: Sequence[Measured], exchanges: int) -> None:
    head = (
        f"{'variant':28} {'s':>6} {'exch/s':>7} {'RSS start':>9} {'processed':>9} "
        f"{'growth':>7} {'KB/exch':>7} {'slope':>6} {'restart':>8} {'(s)':>6} {'peak':>7}"
    )
    print()
    print(head)
    for m in results:
        f = m.figures
        growth = f["rss_processed_gc"] - f["rss_start"]
        print(
            f"{m.variant.name:28} {f['seconds']:6.1f} {exchanges / f['seconds']:7.0f} "
            f"{f['rss_start']:9.1f} {f['rss_processed_gc']:9.1f} {growth:+7.1f} "
            f"{growth * 1024 / exchanges:7.2f} {2 * m.slope_kb():6.2f} "
            f"{f['restart_rss_restarted']:8.1f} {f['restart_start_seconds']:6.2f} "
            f"{f['rss_peak']:7.1f}"
        )
    print(
        "\nMB of RSS. processed: after all records (runtime closed, gc). KB/exch: growth"
        " per exchange; slope: KB per exchange (+ its report) over the second half of"
        " processing (least squares, warm-up excluded). restart: a new runtime started on"
        " the full state, in a fresh process (s: its start-up time). peak: ru_maxrss."
    )


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--exchanges", type=int, default=20_000, help="N exchanges (+N reports)")
    parser.add_argument("--body-kb", type=float, default=5.0, help="KB of bodies per exchange")
    parser.add_argument("--baseline", help="git rev of the old host (default: see docstring)")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree only")
    parser.add_argument(
        "--cache-mb", type=float, action="append", default=[], help="extra cache budgets"
    )
    parser.add_argument(
        "--kafka", action="store_true", help="also this tree's stream worker on Kafka"
    )
    parser.add_argument("--kafka-bootstrap", help="Kafka to use (default: the stack's node)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="reef-bench-memory-") as tmp:
        work = Path(tmp)
        variants = []
        baseline_tree: Path | None = None
        if not args.no_baseline:
            rev = args.baseline or baseline_rev()
            baseline_tree = export_tree(rev, work / "baseline-tree")
            variants.append(Variant(f"baseline {rev[:12]} (dict)", baseline_tree, 0))
        variants.append(Variant("bounded (default cache)", REPO_ROOT, 0))
        for mb in args.cache_mb:
            variants.append(Variant(f"bounded (cache {mb:g} MB)", REPO_ROOT, int(mb * MB)))
        template = work / "template.sqlite3"
        print(f"appending {args.exchanges} exchanges (~{args.body_kb:g} KB) + reports ...")
        began = time.perf_counter()
        await build_log(template, args.exchanges, args.body_kb)
        size = template.stat().st_size / MB
        print(f"log: {size:.0f} MB in {time.perf_counter() - began:.0f} s")
        results = []
        for variant in variants:
            print(f"{variant.name} ...", flush=True)
            results.append(run_variant(variant, template, work))
            if results[-1].figures["samples"] != args.exchanges:
                raise SystemExit(f"{variant.name}: {results[-1].figures['samples']} samples")
        kafka_results: list[tuple[str, dict[str, float]]] = []
        if args.kafka:
            from bench.join_throughput import kafka_bootstrap

            bootstrap = kafka_bootstrap(args.kafka_bootstrap)
            events = workload(args.exchanges, args.body_kb)
            trees = [("this tree (rocksdb)", REPO_ROOT)]
            for name, tree in trees:
                print(f"kafka: {name} ...", flush=True)
                figures, trace = await run_kafka_variant(name, tree, bootstrap, events, work)
                figures["slope_kb"] = slope_kb(trace)
                kafka_results.append((name, figures))
    print_table(results, args.exchanges)
    if kafka_results:
        print_kafka_table(kafka_results, args.exchanges)
    if args.json:
        rows: list[dict[str, Any]] = [
            {"variant": m.variant.name, **m.figures, "slope_kb_per_exchange": 2 * m.slope_kb()}
            for m in results
        ]
        rows += [{"variant": f"kafka: {name}", **figures} for name, figures in kafka_results]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
