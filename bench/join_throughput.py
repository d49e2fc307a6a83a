"""Join throughput: the embedded runtime, ``reef streams`` on Kafka, replay, and two anchors.

    .venv/bin/python bench/join_throughput.py [--reports N] [--kafka-bootstrap HOST:PORT]
        [--only embedded,kafka,anchors,scaling] [--workers 1,2,3] [--profile] [--json PATH]
        [--quix-commit-interval S] [--legacy-scenarios] [--keep-logs] [--timeout S]

One workload for every row (``workload()``): N exchanges (``InferenceRecorded``, ~1 KB chat
bodies) then N reports each quoting one receipt, over 12 scenarios, 2 per partition (names
picked so Kafka's partitioner spreads them evenly; ``--legacy-scenarios``: the original
``bench-0..11``, which land 2, 5, 1, 0, 1, 3 on partitions 0-5): 2N input events, N
outputs. It is encoded once (the real codec) and written afresh for each row, on one
single-node broker, in one run:

1. embedded runtime: an ``EmbeddedRuntime`` (the join as ``reef serve`` hosts it) over a
   fresh SQLite log holding the backlog; start -> all N outputs committed.
2. ``reef streams`` (kafka), one worker process on a fresh topic prefix with the backlog
   already committed: from process start, and from its Ready line (``READY_LINE``:
   assignment taken up, stores restored) -> all N outputs read_committed.
3. replay: :func:`reef.services.replay.replay` (what ``reef replay`` runs, in this process) over
   the embedded log of row 1 and the Kafka topics of row 2; events/s = the processor
   input events it reports (2N), timed with the API projection fold it also does.
4. anchor A: quixstreams (exactly-once, RocksDB state with changelog) doing the join's
   keyed work (``bench/anchor_quixstreams.py``), in its own venv created here
   idempotently (``~/.cache/reef-bench/anchors-venv``: never a Reef dependency).
5. anchor B: the aiokafka transactional consume-transform-produce ceiling with no state
   (``bench/anchor_aiokafka.py``): streams/host.py's loop copying each record.
6. scaling: 1, 2 and 3 ``reef streams`` workers (one group, 6 partitions).

Rows 4-6 are *gated*: the backlog is written in one Kafka transaction left open while
the processes start (read_committed readers see none of it); once every process is Ready
(for several workers: the group's final assignment is logged, disjoint and complete) the
transaction commits and the clock runs from that commit to the last output. So each is
the catch-up of the whole backlog by a settled group, startup and rebalances excluded.

Each row also gives the CPU seconds its process(es) used over the measured span (``cpu-s``,
from /proc; in-process rows: ``time.process_time``): on a shared machine, reports per
CPU-second is the steadier figure. A Reef worker that exits with status 75 (its
exactly-once path gave up) is restarted, as its supervisor would, and counted; the notes
of a Reef row say how many reports were parked (processed before the exchange they quote)
and how many group memberships were lost.

``--profile`` runs one more single worker under cProfile and prints its top functions by
cumulative time and the cost per input record of the host's steps. Without
``--kafka-bootstrap`` the local stack's single node (127.0.0.1:19092) is used, started if
needed (``reef_dev.stack``). Every prefix is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import pstats
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

# before any reef import: the checkout this file is in, not an installed copy, is measured
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.join_anchors import bench_ceiling, bench_quix
from bench.join_kafka import kafka_bootstrap
from bench.join_report import code_version, print_profile, print_table
from bench.join_rows import bench_embedded, bench_kafka, bench_profile, bench_scaling
from bench.join_workload import (
    LEGACY_SCENARIOS,
    PARTITIONS,
    SCENARIOS,
    Bench,
    Row,
    encode,
    workload,
)
from reef.log.partitioner import partition_for

# -- main --------------------------------------------------------------------------------


async def guarded(bench: Bench, what: str, step: Awaitable[Any]) -> bool:
    """Run one section; a failure becomes a FAILED row and the benchmark goes on."""
    try:
        await step
    except Exception as exc:
        bench.failed = True
        print(f"  -> {what} FAILED: {type(exc).__name__}: {exc}", flush=True)
        bench.rows.append(
            Row(what, bench.reports, 2 * bench.reports, 0.0, "FAILED", note=f"{exc}"[:300])
        )
        return False
    return True


SECTIONS = ("embedded", "kafka", "anchors", "scaling")


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reports", type=int, default=10_000, help="N: reports to join")
    parser.add_argument("--kafka-bootstrap", help="Kafka to use (default: the stack's node)")
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    parser.add_argument("--workers", default="1,2,3", help="worker counts of the scaling rows")
    parser.add_argument("--no-replay", action="store_true", help="skip the replay rows")
    parser.add_argument("--profile", action="store_true", help="cProfile one worker run")
    parser.add_argument(
        "--quix-commit-interval", type=float, default=1.0, help="anchor A's commit interval (s)"
    )
    parser.add_argument(
        "--timeout", dest="limit_s", type=float, default=600.0, help="per Kafka row (s)"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    parser.add_argument(
        "--legacy-scenarios",
        action="store_true",
        help="the original 12 names (bench-0..11: 0 to 5 scenarios per partition)",
    )
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if unknown := only - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}")
    counts = [int(w) for w in args.workers.split(",") if w.strip()]

    # produce retries right after topic creation (NotLeaderForPartition) are expected noise
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    bench = Bench(args.reports, code=code_version())
    load_start = os.getloadavg()[0]
    print(f"encoding the workload: {args.reports} reports ...", flush=True)
    scenarios = LEGACY_SCENARIOS if args.legacy_scenarios else SCENARIOS
    spread = Counter(partition_for(s.encode(), PARTITIONS) for s in scenarios)
    bench.notes.append(
        f"{len(scenarios)} scenarios ({'legacy names' if args.legacy_scenarios else 'balanced'})"
        ", per partition 0-5: " + ", ".join(str(spread[p]) for p in range(PARTITIONS))
    )
    pending = encode(workload(args.reports, scenarios))
    profile: tuple[pstats.Stats, float, str] | None = None
    work = Path(tempfile.mkdtemp(prefix="reef-bench-join-"))
    try:
        if "embedded" in only:
            print("embedded runtime ...", flush=True)
            embedded = bench_embedded(bench, pending, not args.no_replay)
            await guarded(bench, "embedded runtime", embedded)
        if only - {"embedded"} or args.profile:
            bench.bootstrap = kafka_bootstrap(args.kafka_bootstrap)
        if "kafka" in only:
            print(f"reef streams x1 on {bench.bootstrap} ...", flush=True)
            x1 = bench_kafka(bench, pending, work, not args.no_replay, args.limit_s)
            await guarded(bench, "reef streams (kafka) x1", x1)
        if "anchors" in only:
            print("anchor A: quixstreams ...", flush=True)
            quix = bench_quix(bench, pending, work, args.quix_commit_interval, args.limit_s)
            await guarded(bench, "anchor A: quixstreams", quix)
            print("anchor B: aiokafka EOS copy ...", flush=True)
            ceiling = bench_ceiling(bench, pending, work, args.limit_s)
            await guarded(bench, "anchor B: aiokafka EOS copy", ceiling)
        if "scaling" in only:
            for workers in counts:
                print(f"scaling: {workers} worker(s), gated ...", flush=True)
                row = bench_scaling(bench, pending, work, workers, args.limit_s)
                await guarded(bench, f"reef streams (kafka) x{workers}", row)
        if args.profile:
            print("profiling one worker ...", flush=True)
            try:
                profile = await bench_profile(bench, pending, work, args.limit_s)
            except Exception as exc:
                bench.failed = True
                print(f"  -> the profiled run FAILED: {type(exc).__name__}: {exc}", flush=True)
    except BaseException:
        bench.failed = True
        raise
    finally:
        if bench.failed or args.keep_logs:
            print(f"(the processes' logs are kept in {work})", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)

    print_table(bench, (load_start, os.getloadavg()[0]))
    if profile is not None:
        print_profile(profile[0], 2 * args.reports, profile[1], profile[2])
    if args.json:
        rows = [
            {
                **asdict(r),
                "reports_per_s": round(r.reports_per_s),
                "events_per_s": round(r.events_per_s),
            }
            for r in bench.rows
        ]
        args.json.write_text(json.dumps({"rows": rows, "figures": bench.figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
