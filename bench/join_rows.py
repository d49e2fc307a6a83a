"""The Reef rows of bench/join_throughput.py: embedded runtime, replay, ``reef streams``.

Row 1 (the embedded runtime), rows 2-3 (one worker, backlog present at start; replay of
both logs), row 6 (1-3 workers, gated) and the profiled single-worker run.
"""

from __future__ import annotations

import asyncio
import pstats
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.join_kafka import (
    cleanup,
    fresh_prefix,
    group_settled,
    kafka_run,
    reef_diagnostics,
    worker_proc,
)
from bench.join_workload import (
    EMBEDDED_REPORTS_TARGET,
    KAFKA_EVENTS_TARGET,
    KAFKA_REPORTS_TARGET,
    REPLAY_EVENTS_TARGET,
    Bench,
    Row,
    outcome_note,
)
from reef.catalog import processors
from reef.codec import EVENT_TYPE_HEADER
from reef.core import topics
from reef.hosts.embedded import EmbeddedRuntime
from reef.log.base import EventLog, PendingAppend
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog
from reef.services.replay import replay
from reef.settings import Settings

# -- embedded ----------------------------------------------------------------------------


async def bench_embedded(bench: Bench, pending: Sequence[PendingAppend], replay_too: bool) -> None:
    n = bench.reports
    with tempfile.TemporaryDirectory(prefix="reef-bench-join-") as tmp:
        log = EmbeddedLog(Path(tmp) / "log.sqlite3")
        await log.start()
        try:
            await log.ensure_topics(list(topics.ALL_TOPICS))
            began = time.perf_counter()
            for start in range(0, len(pending), 2000):
                await log.append_many(pending[start : start + 2000])
            loaded = time.perf_counter() - began
            settings = Settings.of(state_dir=Path(tmp))
            (join,) = [p for p in processors(settings) if p.name == "join"]
            runtime = EmbeddedRuntime(log, join)
            began = time.perf_counter()
            cpu = time.process_time()
            await runtime.start()
            while sum((await log.end_offsets(topics.SAMPLES)).values()) < n:
                if not runtime.healthy():
                    raise RuntimeError("the embedded runtime stopped")
                await asyncio.sleep(0.005)
            seconds = time.perf_counter() - began
            cpu = time.process_time() - cpu
            await runtime.close()
            outcome = await embedded_outcomes(log)
            bench.add(
                Row(
                    "embedded runtime",
                    n,
                    2 * n,
                    seconds,
                    "start -> all outputs committed",
                    f">= {EMBEDDED_REPORTS_TARGET:,} reports/s",
                    n / seconds >= EMBEDDED_REPORTS_TARGET,
                    outcome,
                    cpu,
                )
            )
            bench.notes.append(
                f"embedded backlog written at {len(pending) / loaded:,.0f} events/s "
                "(append_many, 2,000 per transaction)"
            )
            if replay_too:
                await bench_replay(bench, "replay (embedded log)", settings, log)
        finally:
            await log.close()


async def embedded_outcomes(log: EmbeddedLog) -> str:
    kinds: Counter[str] = Counter()
    async for record in log.read(topics.SAMPLES):
        kinds[dict(record.headers).get(EVENT_TYPE_HEADER, b"?").decode()] += 1
    return outcome_note(kinds)


# -- replay ------------------------------------------------------------------------------


async def bench_replay(bench: Bench, name: str, settings: Settings, log: EventLog) -> None:
    began = time.perf_counter()
    cpu = time.process_time()
    result = await replay(processors(settings), log)
    seconds = time.perf_counter() - began
    cpu = time.process_time() - cpu
    bench.add(
        Row(
            name,
            bench.reports,
            result.events,
            seconds,
            "reef.services.replay.replay() in-process",
            f">= {REPLAY_EVENTS_TARGET:,} events/s",
            result.events / seconds >= REPLAY_EVENTS_TARGET,
            f"{result.events} processor inputs; time includes the API fold",
            cpu,
        )
    )


# -- rows 2 and 3 (kafka): one worker, backlog present at start --------------------------


async def bench_kafka(
    bench: Bench, pending: Sequence[PendingAppend], work: Path, replay_too: bool, limit_s: float
) -> None:
    n = bench.reports
    prefix = fresh_prefix("x1")
    try:
        proc = worker_proc(bench.bootstrap, prefix, work / "state-x1", work / "streams-x1.log")
        run = await kafka_run(
            bench.bootstrap,
            prefix,
            pending,
            [proc],
            topics.SAMPLES,
            n,
            gated=False,
            limit_s=limit_s,
        )
        bench.notes.append(
            f"Kafka backlog written at {len(pending) / run.write_seconds:,.0f} events/s "
            "(one transaction, lz4, acks=all)"
        )
        outcome = outcome_note(run.progress.kinds)
        diagnosis = await reef_diagnostics(bench.bootstrap, prefix, [proc])
        bench.add(
            Row(
                "reef streams (kafka) x1",
                n,
                2 * n,
                run.done - run.began,
                "process start -> all outputs",
                note=f"startup to Ready {run.ready - run.began:.2f} s",
                cpu=run.cpu_at_done,
            )
        )
        seconds = run.done - run.ready
        bench.figures["reef_x1_ready"] = n / seconds
        bench.figures["reef_x1_ready_cpu"] = n / run.cpu if run.cpu else 0.0
        bench.add(
            Row(
                "reef streams (kafka) x1",
                n,
                2 * n,
                seconds,
                "Ready -> all outputs (catch-up)",
                f">= {KAFKA_REPORTS_TARGET:,} reports/s, >= {KAFKA_EVENTS_TARGET:,} events/s",
                n / seconds >= KAFKA_REPORTS_TARGET and 2 * n / seconds >= KAFKA_EVENTS_TARGET,
                f"{outcome}; {diagnosis}",
                run.cpu,
            )
        )
        seek_warning = b"was never awaited" in proc.text()
        if seek_warning:
            bench.notes.append(
                "the worker's log shows a coroutine never awaited (see the report: "
                "streams/task_manager.py _seek_committed calls seek_to_beginning without await)"
            )
        if replay_too:
            log = KafkaLog(bench.bootstrap, topic_prefix=prefix, client_id="reef-bench-replay")
            await log.start()
            try:
                settings = Settings.of(
                    log="kafka", kafka_bootstrap=bench.bootstrap, kafka_topic_prefix=prefix
                )
                await bench_replay(bench, "replay (kafka log)", settings, log)
            finally:
                await log.close()
    finally:
        await cleanup(bench.bootstrap, prefix)


# -- row 6: scaling (gated) --------------------------------------------------------------


async def bench_scaling(
    bench: Bench,
    pending: Sequence[PendingAppend],
    work: Path,
    workers: int,
    limit_s: float,
) -> None:
    n = bench.reports
    prefix = fresh_prefix(f"s{workers}")
    try:
        procs = [
            worker_proc(
                bench.bootstrap,
                prefix,
                work / f"state-s{workers}",
                work / f"s{workers}-{i}.log",
            )
            for i in range(workers)
        ]
        run = await kafka_run(
            bench.bootstrap,
            prefix,
            pending,
            procs,
            topics.SAMPLES,
            n,
            gated=True,
            settled=group_settled,
            limit_s=limit_s,
        )
        diagnosis = await reef_diagnostics(bench.bootstrap, prefix, procs)
    finally:
        await cleanup(bench.bootstrap, prefix)
    seconds = run.done - run.committed
    rate = n / seconds
    bench.figures[f"reef_x{workers}_gated"] = rate
    bench.figures[f"reef_x{workers}_gated_cpu"] = n / run.cpu if run.cpu else 0.0
    bench.add(
        Row(
            f"reef streams (kafka) x{workers}",
            n,
            2 * n,
            seconds,
            "gated: settled group, commit -> all",
            f">= {KAFKA_REPORTS_TARGET:,} reports/s" if workers == 1 else "",
            rate >= KAFKA_REPORTS_TARGET if workers == 1 else None,
            f"settled {run.ready - run.began:.1f} s after start; "
            f"{outcome_note(run.progress.kinds)}; {diagnosis}",
            run.cpu,
        )
    )


# -- profile -----------------------------------------------------------------------------


async def bench_profile(
    bench: Bench, pending: Sequence[PendingAppend], work: Path, limit_s: float
) -> tuple[pstats.Stats, float, str] | None:
    n = bench.reports
    prefix = fresh_prefix("prof")
    out = work / "streams.prof"
    try:
        proc = worker_proc(
            bench.bootstrap, prefix, work / "state-prof", work / "streams-prof.log", out
        )
        run = await kafka_run(
            bench.bootstrap,
            prefix,
            pending,
            [proc],
            topics.SAMPLES,
            n,
            gated=False,
            limit_s=limit_s,
        )
        diagnosis = await reef_diagnostics(bench.bootstrap, prefix, [proc])
    finally:
        await cleanup(bench.bootstrap, prefix)
    if not out.exists():
        print("(the profiled worker wrote no profile)")
        return None
    return pstats.Stats(str(out)), n / (run.done - run.ready), diagnosis
