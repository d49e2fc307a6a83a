"""Soak: a fixed request rate through Reef's API for minutes, with reports and training.

What runs (real processes on loopback, started and stopped here):

- ``--log embedded``: one ``reef serve`` (no upstream: its local tiny engine in a child
  process, the stream processors in another, the ``sft`` trainer and the engine's sidecar
  in the serve process), as ``reef demo`` runs it;
- ``--log kafka``: ``reef serve --log kafka`` (API + local engine + sidecar), ``reef
  streams`` (the stream worker hosting the join and the release chain) and ``reef
  trainer`` (sft), all on topics under a unique ``--kafka-topic-prefix`` that is deleted
  at the end. The trainer shares the serve's state dir (local artifact store).

The load is the demo's toy agent: "Return exactly: <word>" chat completions (greedy, 10
tokens) at ``--rate`` requests/s, **open loop**: request *i* is due at ``t0 + i/rate``
whatever happened to earlier ones, and its latency is measured from that due time, so
queueing in the client (a saturated pool, a stalled server) counts (no coordinated
omission). Every answer is graded and reported with its receipt and the right word as a
correction, so samples join, the trainer trains batches of ``--batch`` samples, the gate
accepts or rejects each candidate and the sidecar hot-loads every committed release into
the engine while the load goes on.

Every ``--sample-every`` seconds a row goes to ``docs/soak/soak-<log>.csv`` (over that
window: completions, errors, throughput, p50/p99/max latency of chat completions, report
p99, in flight; at that instant: the RSS of every Reef process, releases committed,
candidates rejected, samples pending, processor lag). At the end the plot
(``soak-<log>.png``) and a summary: overall p50/p99, error rate, throughput vs target,
RSS start/end per process, and the memory verdict.

Memory plateau criterion: the least-squares slope of the total RSS of Reef's processes
over the second half of the run must be below ``max(1 MB/min, 0.1 % of the final total
per minute)`` (a process keeping that pace would grow ~6 %/hour). The first-half slope
(warm-up: torch loads, first training) is printed beside it, per process as well, so a
slow climb can be attributed.

    .venv/bin/python bench/soak.py --log embedded [--duration 600] [--rate 4]
    .venv/bin/python bench/soak.py --log kafka --kafka-bootstrap 127.0.0.1:19092

The Python client shares the machine's cores with everything it measures, so the rates
used here stay far below what one client process can send.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from reef.hosts import READY_LINE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes.tasks import exact
from reef.cli.demo_plans import words
from reef.log.kafka import delete_prefixed_topics
from reef.testing.servers import (
    REPO_ROOT,
    ManagedProcess,
    ReefProcess,
    clean_env,
    reef_executable,
    run_reef,
    spawn,
    start_reef,
)
from reef_dev.stats import percentile, plateau

TOKEN = "soak-token"
SCENARIO = "soak"
ROLES = ("serve", "processors", "engine", "streams", "trainer", "other")
WORKER_ENV = {"REEF_STREAMS_SESSION_TIMEOUT_S": "6"}
MB = 1024 * 1024


# ---------------------------------------------------------------------------
# The deployment under test


def _role(process: psutil.Process) -> str:
    try:
        argv = process.cmdline()
    except psutil.Error:
        return "other"
    if "engine" in argv:
        return "engine"
    if "streams" in argv:
        return "processors"
    return "other"


@dataclass
class Deployment:
    """Reef's processes for one log kind; ``rss()`` maps each role to its RSS in MB."""

    log: str
    reef: ReefProcess
    extra: dict[str, ManagedProcess] = field(default_factory=dict)
    topic_prefix: str | None = None
    bootstrap: str | None = None

    @property
    def base_url(self) -> str:
        return self.reef.base_url

    def processes(self) -> Iterator[tuple[str, psutil.Process]]:
        serve = psutil.Process(self.reef.managed.pid)
        yield "serve", serve
        for child in serve.children(recursive=True):
            yield _role(child), child
        for role, managed in self.extra.items():
            top = psutil.Process(managed.pid)
            yield role, top
            for child in top.children(recursive=True):
                yield role, child

    def rss(self) -> dict[str, float]:
        found: dict[str, float] = {}
        with contextlib.suppress(psutil.Error):
            for role, process in self.processes():
                with contextlib.suppress(psutil.Error):
                    found[role] = found.get(role, 0.0) + process.memory_info().rss / MB
        return found

    def alive(self) -> list[str]:
        """Roles whose top process exited (a soak must not lose one)."""
        dead = [] if self.reef.managed.running() else ["serve"]
        return dead + [role for role, m in self.extra.items() if not m.running()]

    def trainer_status(self) -> dict[str, Any] | None:
        """The out-of-process trainer's last status line (Kafka), else None."""
        trainer = self.extra.get("trainer")
        if trainer is None:
            return None
        lines = [ln for ln in trainer.stderr_text().splitlines() if " status {" in ln]
        if not lines:
            return None
        found: dict[str, Any] = json.loads(lines[-1].split(" status ", 1)[1])
        return found

    def stop(self) -> None:
        self.reef.stop(30)
        for managed in reversed(self.extra.values()):
            managed.stop(30)
        if self.topic_prefix and self.bootstrap:
            asyncio.run(delete_prefixed_topics(self.bootstrap, self.topic_prefix))


def recipe_config(state: Path, batch: int, eval_words: list[str]) -> Path:
    tasks = state.parent / "soak-eval.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"prompt": f"Return exactly: {w}", "answer": w}) + "\n" for w in eval_words
        )
    )
    config = state.parent / "soak-recipe.yaml"
    config.write_text(
        "recipe:\n  eligibility: {max_staleness: 2}\n"
        f"  batching: {{batch_size: {batch}}}\n"
        "  training: {steps: 30, learning_rate: 0.003}\n"
        f"  evaluation: {{tasks_file: {tasks}, max_new_tokens: 10}}\n"
        "  gate: {policy: win_margin, margin: 0.0}\n"
    )
    return config


def reef_env(config: Path) -> dict[str, str]:
    return {
        "REEF_TOKEN": TOKEN,
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_ENGINE_SCENARIO": SCENARIO,
    }


def start_embedded(work: Path, config: Path) -> Deployment:
    reef = start_reef(
        [], env=reef_env(config), state_dir=work / "state", timeout=300.0, name="soak-serve"
    )
    return Deployment("embedded", reef)


def _start_streams(flags: list[str], work: Path, env: dict[str, str]) -> ManagedProcess:
    """``reef streams`` in its own working directory (its data dir is there)."""
    argv = [reef_executable(), "streams", *flags]
    work.mkdir(parents=True, exist_ok=True)
    out, err = work / "streams.stdout.log", work / "streams.stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            argv,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=clean_env({**env, **WORKER_ENV}),
            cwd=work,
        )
    return ManagedProcess(argv, process, out, err)


def _wait_streams_ready(worker: ManagedProcess, timeout: float = 180.0) -> None:
    began = time.monotonic()
    while READY_LINE not in worker.stdout_text() + worker.stderr_text():
        if not worker.running() or time.monotonic() - began > timeout:
            raise SystemExit(f"reef streams did not get ready\n{worker.output()}")
        time.sleep(0.5)


def start_kafka(work: Path, config: Path, bootstrap: str) -> Deployment:
    prefix = f"soak-{uuid.uuid4().hex[:8]}."
    flags = ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]
    created = run_reef("topics", "create", *flags)
    if created.returncode != 0:
        raise SystemExit(f"reef topics create failed\n{created.stdout}\n{created.stderr}")
    env = reef_env(config)
    state = work / "state"
    extra: dict[str, ManagedProcess] = {}
    try:
        extra["streams"] = _start_streams(flags, work / "streams", env)
        trainer_argv = [reef_executable(), "trainer", *flags, "--state-dir", str(state)]
        trainer_argv += ["--status-every", "5"]
        extra["trainer"] = spawn(
            trainer_argv, env=clean_env(env), log_dir=work / "logs", name="trainer"
        )
        reef = start_reef(
            flags, env=env, state_dir=state, log_dir=work / "logs", timeout=300.0, name="serve"
        )
        _wait_streams_ready(extra["streams"])
    except BaseException:
        for managed in extra.values():
            managed.stop(30)
        asyncio.run(delete_prefixed_topics(bootstrap, prefix))
        raise
    return Deployment("kafka", reef, extra, prefix, bootstrap)


# ---------------------------------------------------------------------------
# The load: open loop at a fixed rate


@dataclass
class Outcome:
    done: float  # seconds since the start of the run
    latency: float  # seconds from the due time to the answer
    ok: bool
    kind: str  # "chat" or "report"
    error: str = ""


@dataclass
class Load:
    client: httpx.AsyncClient
    train_words: list[str]
    rng: random.Random
    t0: float
    outcomes: list[Outcome] = field(default_factory=list)
    in_flight: int = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def one(self, due: float, word: str) -> None:
        self.in_flight += 1
        try:
            receipt, answer = await self._chat(due, word)
            if receipt is not None:
                await self._report(receipt, answer, word)
        finally:
            self.in_flight -= 1

    async def _chat(self, due: float, word: str) -> tuple[str | None, str]:
        body = {
            "model": "tiny",
            "temperature": 0,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": f"Return exactly: {word}"}],
        }
        try:
            response = await self.client.post("/v1/chat/completions", json=body)
        except httpx.HTTPError as exc:
            self.outcomes.append(
                Outcome(self.now(), self.now() - due, False, "chat", type(exc).__name__)
            )
            return None, ""
        ok = response.status_code == 200
        self.outcomes.append(
            Outcome(
                self.now(), self.now() - due, ok, "chat", "" if ok else str(response.status_code)
            )
        )
        if not ok:
            return None, ""
        answer = response.json()["choices"][0]["message"]["content"] or ""
        return response.headers["x-reef-agent-record-id"], answer

    async def _report(self, receipt: str, answer: str, word: str) -> None:
        started = self.now()
        body = {
            "score": exact(answer, word),
            "feedback": {"correction": word},
            "references": [receipt],
        }
        try:
            response = await self.client.post("/reef/report", json=body)
            ok = response.status_code in (200, 201, 202)
            error = "" if ok else str(response.status_code)
        except httpx.HTTPError as exc:
            ok, error = False, type(exc).__name__
        self.outcomes.append(Outcome(self.now(), self.now() - started, ok, "report", error))

    async def drive(self, rate: float, duration: float, max_in_flight: int) -> None:
        """Start request *i* at ``i / rate`` (late starts keep their due time)."""
        tasks: set[asyncio.Task[None]] = set()
        index = 0
        while (due := index / rate) < duration:
            delay = due - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            index += 1
            if self.in_flight >= max_in_flight:  # the client would only queue deeper
                self.outcomes.append(Outcome(self.now(), self.now() - due, False, "chat", "shed"))
                continue
            task = asyncio.create_task(self.one(due, self.rng.choice(self.train_words)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=90)


# ---------------------------------------------------------------------------
# Sampling


COLUMNS = [
    "t_s",
    "requests",
    "errors",
    "error_rate",
    "throughput_rps",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "reports",
    "report_errors",
    "report_p99_ms",
    "in_flight",
    "rss_total_mb",
    *(f"rss_{role}_mb" for role in ROLES),
    "releases_committed",
    "candidates_rejected",
    "samples_pending",
    "processor_lag",
    "load_1m",
]


def window_row(
    load: Load, start: float, end: float, rss: dict[str, float], status: dict[str, Any]
) -> dict[str, Any]:
    chats = [o for o in load.outcomes if o.kind == "chat" and start < o.done <= end]
    reports = [o for o in load.outcomes if o.kind == "report" and start < o.done <= end]
    latencies = [o.latency * 1000 for o in chats if o.ok]
    errors = sum(1 for o in chats if not o.ok)
    row: dict[str, Any] = {
        "t_s": round(end, 1),
        "requests": len(chats),
        "errors": errors,
        "error_rate": round(errors / len(chats), 4) if chats else 0.0,
        "throughput_rps": round(len(chats) / (end - start), 2),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1) if latencies else math.nan,
        "reports": len(reports),
        "report_errors": sum(1 for o in reports if not o.ok),
        "report_p99_ms": round(percentile([o.latency * 1000 for o in reports if o.ok], 99), 1),
        "in_flight": load.in_flight,
        "rss_total_mb": round(sum(rss.values()), 1),
    }
    for role in ROLES:
        row[f"rss_{role}_mb"] = round(rss[role], 1) if role in rss else ""
    row.update(status)
    row["load_1m"] = round(psutil.getloadavg()[0], 2)  # the machine's contention
    return row


async def reef_status(client: httpx.AsyncClient, deployment: Deployment) -> dict[str, Any]:
    """Releases committed, candidates rejected, samples pending, processor lag (blank when
    the status call fails: that is noted in the row, not counted as a request error)."""
    found: dict[str, Any] = dict.fromkeys(COLUMNS[-5:-1], "")
    try:
        body = (await client.get("/reef/status", timeout=10.0)).raise_for_status().json()
    except (httpx.HTTPError, ValueError):
        return found
    scenario = body.get("scenarios", {}).get(SCENARIO, {})
    found["releases_committed"] = max(0, int(scenario.get("releases", 1)) - 1)
    found["samples_pending"] = body.get("samples_pending", "")
    lag = 0
    for processor in body.get("processors", {}).values():
        for partitions in processor.get("lag", {}).values():
            lag += sum(partitions.values()) if isinstance(partitions, dict) else int(partitions)
    found["processor_lag"] = lag
    trainer = body.get("trainer") or deployment.trainer_status() or {}
    found["candidates_rejected"] = trainer.get("candidates", {}).get("rejected", "")
    return found


async def sample_loop(
    load: Load,
    deployment: Deployment,
    every: float,
    stop: asyncio.Event,
    writer: Any,
    handle: Any,
    rows: list[dict[str, Any]],
) -> None:
    last, final = 0.0, False
    while not final:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, last + every - load.now()))
        # the load has ended once stop is set: this window, read after it, is the last and
        # holds every outcome (a window read while the last requests finished would miss them)
        final = stop.is_set()
        end = load.now()
        rss = await asyncio.to_thread(deployment.rss)
        status = await reef_status(load.client, deployment)
        row = window_row(load, last, end, rss, status)
        rows.append(row)
        writer.writerow(row)
        handle.flush()
        last = end
        dead = deployment.alive()
        print(
            f"t={row['t_s']:>6.0f}s  req={row['requests']:>4} err={row['errors']:>3} "
            f"p50={row['p50_ms']:>8.1f} p99={row['p99_ms']:>8.1f} ms  "
            f"rss={row['rss_total_mb']:>7.1f} MB  releases={row['releases_committed']} "
            f"rejected={row['candidates_rejected']} pending={row['samples_pending']} "
            f"lag={row['processor_lag']} load={row['load_1m']}"
            + (f"  DEAD: {dead}" if dead else ""),
            flush=True,
        )


async def soak(
    deployment: Deployment, args: argparse.Namespace, csv_path: Path
) -> tuple[Load, list[dict[str, Any]]]:
    all_words = words(620, seed=11)
    headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": SCENARIO}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(
        base_url=deployment.base_url, headers=headers, timeout=args.timeout, limits=limits
    ) as client:
        # the first request creates the scenario (its creation release serves)
        (
            await client.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
            )
        ).raise_for_status()
        load = Load(client, all_words[:500], random.Random(5), time.monotonic())
        stop = asyncio.Event()
        with csv_path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            sampler = asyncio.create_task(
                sample_loop(load, deployment, args.sample_every, stop, writer, handle, rows)
            )
            await load.drive(args.rate, args.duration, max(16, int(args.rate * 60)))
            stop.set()
            await sampler
    return load, rows


# ---------------------------------------------------------------------------
# Output


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [float(r["t_s"]) for r in rows]

    def series(name: str) -> list[float]:
        return [float(r[name]) if r[name] != "" else math.nan for r in rows]

    figure, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    axes[0].plot(t, series("p50_ms"), label="p50")
    axes[0].plot(t, series("p99_ms"), label="p99")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("chat latency (ms, from due time)")
    axes[0].legend(loc="upper left")
    axes[1].plot(t, series("throughput_rps"), label="completions/s")
    axes[1].set_ylabel("throughput (req/s)")
    axes[1].set_ylim(bottom=0)
    errors = axes[1].twinx()
    error_pct = [100 * v for v in series("error_rate")]
    errors.plot(t, error_pct, color="red", label="error %")
    errors.set_ylim(0, max(1.0, *error_pct) * 1.1)
    errors.set_ylabel("errors (%)", color="red")
    for role in ROLES:
        values = series(f"rss_{role}_mb")
        if any(not math.isnan(v) for v in values):
            axes[2].plot(t, values, label=role)
    axes[2].plot(t, series("rss_total_mb"), color="black", linestyle="--", label="total")
    axes[2].set_ylabel("RSS (MB)")
    axes[2].set_ylim(bottom=0)
    axes[2].legend(loc="center right", fontsize="small", ncol=3)
    axes[3].step(t, series("releases_committed"), where="post", label="releases committed")
    axes[3].step(t, series("candidates_rejected"), where="post", label="candidates rejected")
    axes[3].set_ylabel("count")
    axes[3].set_xlabel("seconds into the soak")
    axes[3].legend(loc="upper left")
    axes[0].set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def summary(load: Load, rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    chats = [o for o in load.outcomes if o.kind == "chat"]
    reports = [o for o in load.outcomes if o.kind == "report"]
    ok = [o.latency * 1000 for o in chats if o.ok]
    errors: dict[str, int] = {}
    for outcome in chats + reports:
        if not outcome.ok:
            key = f"{outcome.kind}:{outcome.error}"
            errors[key] = errors.get(key, 0) + 1
    failed = sum(1 for o in chats if not o.ok)
    lines = [
        f"soak on {args.log}: {args.duration:.0f} s at {args.rate:g} req/s target, "
        f"sampled every {args.sample_every:g} s",
        f"chat completions: {len(chats)} ({len(chats) / args.duration:.2f}/s), "
        f"errors {failed} ({100 * failed / max(1, len(chats)):.2f} %)  {errors or ''}",
        f"latency from due time: p50 {percentile(ok, 50):.1f} ms, p99 {percentile(ok, 99):.1f}"
        f" ms, max {max(ok, default=math.nan):.1f} ms",
        f"reports: {len(reports)}, errors {sum(1 for o in reports if not o.ok)}, "
        f"p99 {percentile([o.latency * 1000 for o in reports if o.ok], 99):.1f} ms",
    ]
    if rows:
        last = rows[-1]
        lines.append(
            f"releases committed {last['releases_committed']}, candidates rejected "
            f"{last['candidates_rejected']}, samples pending {last['samples_pending']}, "
            f"processor lag {last['processor_lag']}"
        )
        lines.append(
            f"{'process':<11} {'RSS start':>10} {'RSS end':>10} {'1st-half slope':>15} "
            f"{'2nd-half slope':>15}"
        )
        for role in (*ROLES, "total"):
            column = f"rss_{role}_mb"
            points = [(float(r["t_s"]), float(r[column])) for r in rows if r[column] != ""]
            if not points:
                continue
            verdict = plateau(points, args.duration)
            lines.append(
                f"{role:<11} {points[0][1]:>8.1f}MB {points[-1][1]:>8.1f}MB "
                f"{verdict.first_half:>+10.2f}MB/min {verdict.second_half:>+10.2f}MB/min"
            )
        loads = [float(r["load_1m"]) for r in rows]
        lines.append(
            f"machine load (1-min average) during the soak: mean {sum(loads) / len(loads):.2f},"
            f" max {max(loads):.2f} on {psutil.cpu_count()} cores"
        )
        total = plateau([(float(r["t_s"]), float(r["rss_total_mb"])) for r in rows], args.duration)
        verdict = (
            "PLATEAUS"
            if total.plateaus
            else "CANNOT TELL (under 3 samples in a half)"
            if math.isnan(total.second_half)
            else "DOES NOT PLATEAU"
        )
        lines.append(
            f"memory {verdict}: total RSS slope "
            f"over the second half {total.second_half:+.2f} MB/min vs threshold "
            f"{total.threshold:.2f} MB/min (first half {total.first_half:+.2f} MB/min)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log", choices=["embedded", "kafka"], default="embedded")
    parser.add_argument("--kafka-bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=4.0, help="chat completions per second")
    parser.add_argument("--batch", type=int, default=128, help="samples per training batch")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds per CSV row")
    parser.add_argument("--timeout", type=float, default=60.0, help="client timeout (s)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "soak")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    parser.add_argument(
        "--replot", action="store_true", help="only redraw the plot from the existing CSV"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"soak-{args.log}.csv"
    if args.replot:
        with csv_path.open() as handle:
            saved = list(csv.DictReader(handle))
        plot(saved, args.out / f"soak-{args.log}.png", f"Reef soak on the {args.log} log")
        return
    work = Path(tempfile.mkdtemp(prefix=f"reef-soak-{args.log}-"))
    all_words = words(620, seed=11)
    config = recipe_config(work / "state", args.batch, all_words[500:560])
    began = time.monotonic()
    deployment = (
        start_embedded(work, config)
        if args.log == "embedded"
        else start_kafka(work, config, args.kafka_bootstrap)
    )
    print(f"{args.log}: Reef up in {time.monotonic() - began:.0f} s ({work})", flush=True)
    try:
        load, rows = asyncio.run(soak(deployment, args, csv_path))
        dead = deployment.alive()
    finally:
        deployment.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    plot(rows, args.out / f"soak-{args.log}.png", f"Reef soak on the {args.log} log")
    for line in summary(load, rows, args):
        print(line)
    print(f"wrote {csv_path} and {args.out / f'soak-{args.log}.png'}")
    if dead:
        raise SystemExit(f"Reef processes exited during the soak: {dead}")


if __name__ == "__main__":
    main()
