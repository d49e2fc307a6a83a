"""The anchors of bench/join_throughput.py (rows 4 and 5), each gated like Reef's rows.

Anchor A: quixstreams doing the join's keyed work (bench/anchor_quixstreams.py), in its
own venv created here idempotently (never a Reef dependency). Anchor B: the aiokafka
transactional consume-transform-produce ceiling with no state (bench/anchor_aiokafka.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.join_kafka import Proc, cleanup, fresh_prefix, kafka_run
from bench.join_workload import Bench, Row
from reef.core import topics
from reef.log.base import PendingAppend

BENCH = Path(__file__).resolve().parent
ANCHORS_VENV = Path.home() / ".cache" / "reef-bench" / "anchors-venv"
QUIX_REQUIREMENT = "quixstreams>=3.20,<4"
ANCHOR_READY = "anchor: ready"


def anchors_python() -> Path:
    """The anchors' interpreter, quixstreams installed (created once, then reused)."""
    python = ANCHORS_VENV / "bin" / "python"
    probe = [str(python), "-c", "import quixstreams, sys; print(quixstreams.__version__)"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"creating {ANCHORS_VENV} with {QUIX_REQUIREMENT} (once) ...", flush=True)
    ANCHORS_VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(ANCHORS_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, QUIX_REQUIREMENT], check=True)
    return python


def quix_version(python: Path) -> str:
    probe = [str(python), "-c", "import quixstreams; print(quixstreams.__version__)"]
    return subprocess.run(probe, capture_output=True, text=True).stdout.strip()


async def bench_quix(
    bench: Bench,
    pending: Sequence[PendingAppend],
    work: Path,
    commit_interval: float,
    limit_s: float,
) -> None:
    n = bench.reports
    python = anchors_python()
    prefix = fresh_prefix("quix")
    group = prefix + "anchor-quix"
    try:
        proc = Proc(
            [
                str(python),
                str(BENCH / "anchor_quixstreams.py"),
                "--bootstrap",
                bench.bootstrap,
                "--group",
                group,
                "--inference",
                prefix + topics.INFERENCE,
                "--reports",
                prefix + topics.REPORTS,
                "--output",
                prefix + topics.SAMPLES,
                "--state-dir",
                str(work / "quix-state"),
                "--commit-interval",
                str(commit_interval),
            ],
            work / "anchor-quix.log",
            ANCHOR_READY.encode(),
        )
        run = await kafka_run(
            bench.bootstrap,
            prefix,
            pending,
            [proc],
            topics.SAMPLES,
            n,
            gated=True,
            limit_s=limit_s,
        )
    finally:
        await cleanup(bench.bootstrap, prefix, f"changelog__{prefix}", f"repartition__{prefix}")
    seconds = run.done - run.committed
    bench.figures["quix"] = n / seconds
    bench.figures["quix_cpu"] = n / run.cpu if run.cpu else 0.0
    fates = re.findall(rb"anchor: joined=\d+ missing=\d+", proc.text())
    bench.add(
        Row(
            f"anchor A: quixstreams {quix_version(python)}",
            n,
            2 * n,
            seconds,
            "gated: Ready -> commit -> all",
            "reef x1 must beat it",
            note=(fates[-1].decode().removeprefix("anchor: ") if fates else "")
            + f"; EOS, RocksDB+changelog, commit every {commit_interval:g} s",
            cpu=run.cpu,
        )
    )


async def bench_ceiling(
    bench: Bench, pending: Sequence[PendingAppend], work: Path, limit_s: float
) -> None:
    n = bench.reports
    prefix = fresh_prefix("ceil")
    out_topic = "bench.ceiling-out"
    try:
        proc = Proc(
            [
                sys.executable,
                str(BENCH / "anchor_aiokafka.py"),
                "--bootstrap",
                bench.bootstrap,
                "--group",
                prefix + "anchor-ceiling",
                "--input",
                prefix + topics.INFERENCE,
                "--input",
                prefix + topics.REPORTS,
                "--output",
                prefix + out_topic,
            ],
            work / "anchor-ceiling.log",
            ANCHOR_READY.encode(),
        )
        run = await kafka_run(
            bench.bootstrap,
            prefix,
            pending,
            [proc],
            out_topic,
            2 * n,
            gated=True,
            extra_topics=[out_topic],
            limit_s=limit_s,
        )
    finally:
        await cleanup(bench.bootstrap, prefix)
    seconds = run.done - run.committed
    bench.figures["ceiling_events"] = 2 * n / seconds
    bench.figures["ceiling_events_cpu"] = 2 * n / run.cpu if run.cpu else 0.0
    bench.add(
        Row(
            "anchor B: aiokafka EOS copy",
            n,
            2 * n,
            seconds,
            "gated: Ready -> commit -> all",
            "ceiling (no decode, no state)",
            note=f"{2 * n} records copied, txn per poll per partition",
            cpu=run.cpu,
        )
    )
