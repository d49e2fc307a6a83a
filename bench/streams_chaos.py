"""Chaos for ``reef streams`` on Kafka: a steady load through the API and N random faults.

What runs (real processes on loopback, on a Kafka of the bench's own):

- a private Kafka on free ports in a temporary directory, killed and deleted at the end:
  one node (``--cluster single``) or three (``--cluster three``: RF 3, min ISR 2). The
  shared stack (``scripts/stack``) is never touched: its brokers are what other tests use;
- ``reef topics create``, then ``reef serve --log kafka`` on a fresh topic prefix, with
  the scripted upstream (reef/testing/scripted_upstream.py);
- 1-3 ``reef streams`` workers (``--workers`` at the start), each with its own
  ``--instance-id`` (a static member, the product's default 10 s session: a killed worker is
  restarted under its id and a removed one leaves the group), supervised: a worker that
  exits on its own is restarted after 1 s (status 75 is the host's "cannot continue,
  restart me"; any other status is a crash, counted apart);
- the steady load (reef_dev/load.py): ``--rate`` chat completions per second, open
  loop, each followed by a report quoting its receipt.

Each cycle injects one fault, chosen at random (``--seed``):

- ``worker-kill``: SIGKILL of a worker, restarted after 0-3 s (same instance id);
- ``broker-stall``: SIGSTOP of a broker (three: one of them) for 5-20 s, then SIGCONT;
- ``broker-kill`` (``--cluster three`` only): SIGKILL of a broker, restarted after 3-10 s;
- ``rebalance``: a worker added, or one removed (SIGTERM), keeping 1-3 workers.

After each cycle, once the fault is healed:

1. the clients' acknowledgements so far are snapshotted, then the input topics' end
   offsets are read (the *cut*); the group ``<prefix>reef-streams`` must commit past the
   cut (and every worker be ready) within ``--catchup`` seconds: the recovery time, from
   the heal. Past the bound the bench keeps waiting (up to 5 minutes) and counts it;
2. the log (read incrementally, read_committed) against the clients: every acknowledged
   receipt and report is on the log, every report below the cut has exactly one fate, no
   sample id twice, no receipt in two samples, no acknowledged report rejected.

Wedges are watched all along, once a second, from outside and independently of the
product's own watchdog (bench/chaos_support.py ``WedgeMonitor``), counted two ways:

- *wedge*: an input partition held by a live worker process of a Stable group, records
  waiting (end offset > committed offset of the group) and no commit progress for
  ``--wedge-s`` (10) seconds: a worker that holds input and does nothing. One still there
  after 45 s is ended with SIGKILL (and restarted);
- *no-progress incident*: the same without the group's help: records waiting, a worker
  process alive (the partition's owner when the group names one, any worker when it
  names none) and no commit progress for ``--wedge-s``: also a rebalance that does not
  end, or ends slowly. Overlapping partitions make one incident.

No clock runs while a broker is stopped or dead (nobody can commit then). Before the
cycles, a deliberate wedge (SIGUSR2: the host stops processing) proves the monitor sees
one; it is not counted (``--no-self-test`` skips it).

At the end the load stops, the group must catch up completely and every report in the
log must have exactly one fate. The table (stdout, and ``summary.json`` beside the logs)
gives cycles, faults by kind, wedges, no-progress incidents, restarts, max recovery, lost
and duplicated. Exit status 1 if there was any wedge, no-progress incident, loss,
duplicate, report without a fate, catch-up past the bound, or crash (a worker exit other
than 75, or a removed worker that did not stop with 0).

    .venv/bin/python bench/streams_chaos.py --cycles 5
    .venv/bin/python bench/streams_chaos.py --cluster three --max-minutes 25

Logs (every worker start, reef serve, the brokers' server.log) stay in the printed
directory. The machine's cores are shared with everything measured; on a loaded 2-core
host the recovery times include waiting for a CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chaos_support import (
    INPUT_TOPICS,
    CheckResult,
    Ledger,
    Observation,
    PrivateKafka,
    Supervisor,
    WedgeMonitor,
    cut_for,
    kafka_flags,
    no_progress_incidents,
)
from reef.core import topics
from reef.testing.servers import ReefProcess, run_reef, start_reef, start_upstream
from reef_dev.load import LoadResult, SteadyLoad

TOKEN = "reef-chaos-token"
FAULTS = ("worker-kill", "broker-stall", "rebalance")
CLUSTER_FAULTS = (*FAULTS, "broker-kill")
HARD_LIMIT_S = 300.0


@dataclass
class Cycle:
    n: int
    kind: str
    detail: str
    fault_s: float
    recovery_s: float | None = None
    api_back_s: float | None = None
    over_bound: bool = False
    workers: int = 0
    check: CheckResult = field(default_factory=CheckResult)
    ledger_s: float = 0.0

    def line(self) -> str:
        rec = "NEVER" if self.recovery_s is None else f"{self.recovery_s:5.1f}s"
        api = "-" if self.api_back_s is None else f"{self.api_back_s:.1f}s"
        c = self.check
        flags = " OVER-BOUND" if self.over_bound else ""
        return (
            f"cycle {self.n:3d} {self.kind:12s} {self.detail:44s} fault {self.fault_s:5.1f}s "
            f"recovered {rec} api {api} | workers {self.workers} | lost {c.lost} dup "
            f"{c.duplicated} no-fate {len(c.without_fate)}{flags}"
        )


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def echo(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {text}", flush=True)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--cluster", choices=("single", "three"), default="single")
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--rate", type=float, default=10.0, help="chat completions per second")
    p.add_argument("--workers", type=int, default=2, choices=(1, 2, 3))
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--catchup", type=float, default=60.0, help="catch-up bound per cycle, s")
    p.add_argument("--wedge-s", type=float, default=10.0, help="no progress -> wedge, s")
    p.add_argument("--stall-timeout", type=float, default=15.0, help="the product's watchdog")
    p.add_argument("--max-minutes", type=float, default=None, help="no new cycle past this")
    p.add_argument("--out", type=Path, default=None, help="log directory (default: a tmp dir)")
    p.add_argument(
        "--code",
        choices=("head", "tree"),
        default="head",
        help="head: the processes run a snapshot of the committed HEAD (git archive), so "
        "edits landing in the working tree mid-run change nothing; tree: the working tree",
    )
    p.add_argument(
        "--no-self-test",
        action="store_true",
        help="skip the first, deliberate wedge (SIGUSR2) that proves the detector sees one",
    )
    return p.parse_args()


def create_scenarios(base_url: str, count: int) -> list[str]:
    names = [f"chaos-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60.0) as client:
        for name in names:
            response = client.post("/reef/scenarios", json={"name": name})
            assert response.status_code == 201, response.text
    return names


def code_version() -> str:
    """HEAD and whether streams/ or reef/ differ from it: workers restarted during the run
    run whatever is on disk then, so a commit landing mid-run changes the code under test."""
    repo = Path(__file__).resolve().parents[1]

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", *argv], cwd=repo, capture_output=True, text=True, check=False, timeout=30
        )
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--", "streams", "reef")
    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty else "")


def snapshot_head(target: Path) -> str:
    """Extract HEAD's packages under ``target`` and put it first on the children's
    PYTHONPATH (before the editable install's path entry); returns HEAD's short hash."""
    repo = Path(__file__).resolve().parents[1]
    target.mkdir(parents=True, exist_ok=True)
    archive = target / "head.tar"
    paths = ["reef", "streams", "recipes", "trainers", "schemas"]
    subprocess.run(
        ["git", "archive", "--format=tar", "-o", str(archive), "HEAD", *paths],
        cwd=repo,
        check=True,
        timeout=60,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    archive.unlink()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(target) + (os.pathsep + old if old else "")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return f"HEAD {head.stdout.strip()}"


def _terminate(*_: Any) -> None:
    raise KeyboardInterrupt


def main() -> int:
    args = parse()
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    root = args.out or Path(tempfile.mkdtemp(prefix="reef-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    echo = clock.echo
    signal.signal(signal.SIGTERM, _terminate)
    # the monitor's and the ledger's clients retry through broker faults: no warnings
    logging.basicConfig(level=logging.ERROR, format="  [%(name)s] %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    echo(f"streams chaos: cluster {args.cluster}, seed {seed}, rate {args.rate}/s, logs {root}")
    version = code_version()
    if args.code == "head":
        version = snapshot_head(root / "code")
        echo(f"code under test: {version} (snapshot in {root / 'code'}, on PYTHONPATH)")
    else:
        echo(f"code under test: the working tree ({version}); edits mid-run change it")

    with contextlib.ExitStack() as stack:
        kafka = PrivateKafka(root / "kafka", 3 if args.cluster == "three" else 1)
        stack.callback(kafka.close, root)
        echo(f"starting a private Kafka ({len(kafka.ids)} node(s)) at {kafka.bootstrap} ...")
        kafka.start()
        bootstrap = kafka.bootstrap
        prefix = f"chaos-{uuid.uuid4().hex[:8]}-"
        created = run_reef(
            "topics",
            "create",
            *kafka_flags(bootstrap, prefix),
            "--partitions",
            str(args.partitions),
            timeout=180,
        )
        assert created.returncode == 0, f"reef topics create:\n{created.stdout}\n{created.stderr}"
        upstream = start_upstream(root / "upstream")
        stack.callback(upstream.stop)
        serve_env = {
            "REEF_TOKEN": TOKEN,
            "REEF_UPSTREAM_API_KEY": f"sk-upstream-{uuid.uuid4().hex[:8]}",
            "REEF_KAFKA_APPEND_TIMEOUT_S": "3",
            "REEF_PARTITIONS": str(args.partitions),
        }
        reef: ReefProcess = start_reef(
            [*kafka_flags(bootstrap, prefix), "--upstream-url", upstream.v1_url],
            env=serve_env,
            state_dir=root / "serve-state",
            log_dir=root / "serve",
            timeout=180.0,
            name="reef",
        )
        stack.callback(reef.stop)
        scenarios = create_scenarios(reef.base_url, 3)

        worker_env = {
            "REEF_STREAMS_STALL_TIMEOUT_S": str(args.stall_timeout),
            "REEF_PARTITIONS": str(args.partitions),
        }
        supervisor = Supervisor(bootstrap, prefix, root / "workers", worker_env, echo).start()
        stack.callback(supervisor.close)
        for _ in range(args.workers):
            supervisor.add()
        wait_until(supervisor.all_ready, 240, "the first workers ready")
        group = prefix + topics.STREAMS_APP_ID
        monitor = WedgeMonitor(
            bootstrap,
            group,
            [prefix + t for t in INPUT_TOPICS],
            args.partitions,
            supervisor,
            stall_s=args.wedge_s,
            echo=echo,
            log_path=root / "observations.jsonl",
        ).start()
        stack.callback(monitor.close)
        load = SteadyLoad([reef.base_url], TOKEN, scenarios, rate=args.rate, timeout=30.0)
        load.start()
        stack.callback(load.stop)
        load.wait_acks(20, timeout=120)
        echo(f"ready: {args.workers} workers, load at {args.rate}/s; group {group}")

        self_test = None
        if not args.no_self_test:
            self_test = wedge_self_test(prefix, supervisor, monitor, echo)

        ledger = Ledger(bootstrap, prefix)
        chaos = Chaos(args, rng, kafka, supervisor, monitor, echo)
        cycles: list[Cycle] = []
        began = time.monotonic()
        for n in range(1, args.cycles + 1):
            if args.max_minutes and time.monotonic() - began > args.max_minutes * 60:
                echo(f"time is up after {n - 1} cycles")
                break
            settle(supervisor, monitor, echo)
            time.sleep(rng.uniform(2.0, 5.0))
            cycle = chaos.cycle(n)
            snap, cut = recover(cycle, load, supervisor, monitor, args.catchup, echo)
            cycle.ledger_s = ledger.update()
            cycle.check = ledger.check(snap, cut_for(cut, prefix + topics.REPORTS))
            cycle.workers = len(supervisor.live())
            cycles.append(cycle)
            echo(cycle.line())
            for problem in cycle.check.problems():
                echo(f"  PROBLEM: {problem}")

        echo("stopping the load; the group must catch up completely")
        result = load.stop()
        final_s = final_catch_up(supervisor, monitor, args.catchup, echo)
        deadline = time.monotonic() + 60
        while True:
            ledger.update()
            final = ledger.check(result, None)
            if not final.without_fate or time.monotonic() > deadline:
                break
            time.sleep(2)
        for problem in final.problems():
            echo(f"  FINAL PROBLEM: {problem}")

        summary = summarize(args, seed, cycles, final, final_s, supervisor, monitor, result)
        summary["ledger_records"] = ledger.records
        summary["wedge_self_test"] = self_test
        summary["code"] = version
        if args.code == "tree" and code_version() != version:
            echo(f"WARNING: the code under test changed during the run: now {code_version()}")
        (root / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        print_table(summary, supervisor, monitor, echo)
        if monitor.wedges:
            for i, wedge in enumerate(monitor.wedges, 1):
                (root / f"wedge-{i}.log").write_text(wedge.describe() + "\n\n" + wedge.log_tail)
        failed = summary["failed"]
    echo(f"logs kept in {root}")
    return 1 if failed else 0


def wedge_self_test(
    prefix: str, supervisor: Supervisor, monitor: WedgeMonitor, echo: Callable[[str], None]
) -> str:
    """SIGUSR2 to the worker holding the busiest inference partition (the host stops
    processing on purpose): the monitor must report a wedge. Not counted in the results."""
    seen = monitor.wait_observation(after=time.monotonic(), timeout=60)
    assert seen is not None, "the group is not observable"
    inference = [tp for tp in seen.ends if tp.topic == prefix + topics.INFERENCE]
    busiest = max(inference, key=lambda tp: seen.ends[tp])
    worker = supervisor.live_instances().get(seen.owners.get(busiest, ""))
    assert worker is not None and worker.pid is not None, f"nobody holds {busiest}"
    pid = worker.pid
    before = len(monitor.wedges)
    echo(f"self-test: SIGUSR2 to worker {worker.slot} (pid {pid}, holds {busiest.partition})")
    os.kill(pid, signal.SIGUSR2)
    began = time.monotonic()
    found = None
    while time.monotonic() - began < 60 and found is None:
        found = next((w for w in monitor.wedges[before:] if w.pid == pid), None)
        time.sleep(0.3)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: supervisor.exit_of(pid) is not None, 60, "the wedged worker gone")
    ended = supervisor.exit_of(pid)
    del monitor.wedges[before:]  # the deliberate one is no finding
    monitor.stalls.clear()
    if found is None:
        raise RuntimeError("self-test: the monitor did not see a deliberate wedge in 60 s")
    outcome = "alive" if ended is None else f"exit {ended.status} ({ended.cause})"
    result = (
        f"deliberate wedge seen after {found.at - began:.1f} s "
        f"({found.seconds:.0f} s without progress); worker then: {outcome}"
    )
    echo(f"self-test: {result}")
    if ended is not None and ended.cause == "75":
        supervisor.forget(ended)  # not a restart of the chaos
    return result


def wait_until(probe: Callable[[], bool], timeout: float, what: str) -> float:
    began = time.monotonic()
    while not probe():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"not {what} in {timeout:.0f} s")
        time.sleep(0.3)
    return time.monotonic() - began


def settle(supervisor: Supervisor, monitor: WedgeMonitor, echo: Callable[[str], None]) -> None:
    """Before a fault: every worker ready, the group Stable with every input partition held
    by a live worker (up to 60 s; the fault comes anyway after that)."""

    def steady() -> bool:
        seen = monitor.last()
        if seen is None or not seen.ok or seen.state != "Stable" or not supervisor.all_ready():
            return False
        live = supervisor.live_instances()
        return all(seen.owners.get(tp) in live for tp in monitor.tps)

    try:
        wait_until(steady, 60, "steady")
    except TimeoutError:
        seen = monitor.last()
        state = "unobserved" if seen is None else f"{seen.state} {seen.error}"
        echo(f"  not steady after 60 s (group {state}); injecting anyway")


class Chaos:
    def __init__(
        self,
        args: argparse.Namespace,
        rng: random.Random,
        kafka: PrivateKafka,
        supervisor: Supervisor,
        monitor: WedgeMonitor,
        echo: Callable[[str], None],
    ) -> None:
        self.args = args
        self.rng = rng
        self.kafka = kafka
        self.supervisor = supervisor
        self.monitor = monitor
        self.echo = echo
        self.kinds = CLUSTER_FAULTS if args.cluster == "three" else FAULTS
        self.healed_at = 0.0

    def cycle(self, n: int) -> Cycle:
        kind = self.rng.choice(self.kinds)
        began = time.monotonic()
        detail = getattr(self, "_" + kind.replace("-", "_"))()
        self.healed_at = time.monotonic()
        return Cycle(n, kind, detail, self.healed_at - began)

    def _worker_kill(self) -> str:
        worker = self.rng.choice(self.supervisor.live())
        down = self.rng.uniform(0.0, 3.0)
        self.supervisor.kill(worker)
        time.sleep(down)
        self.supervisor.restart(worker)
        return f"worker {worker.slot} SIGKILL, back after {down:.1f}s"

    def _broker_stall(self) -> str:
        node = self.rng.choice(self.kafka.ids)
        seconds = self.rng.uniform(5.0, 20.0)
        with self.monitor.paused():
            self.kafka.sigstop(node)
            try:
                time.sleep(seconds)
            finally:
                self.kafka.sigcont(node)
        return f"broker {node} SIGSTOP {seconds:.1f}s"

    def _broker_kill(self) -> str:
        node = self.rng.choice(self.kafka.ids)
        down = self.rng.uniform(3.0, 10.0)
        with self.monitor.paused():
            self.kafka.kill(node)
            time.sleep(down)
            back = self.kafka.restart(node)
        return f"broker {node} SIGKILL, down {down:.1f}s, rejoined {back:.1f}s"

    def _rebalance(self) -> str:
        live = self.supervisor.live()
        add = len(live) == 1 or (len(live) < 3 and self.rng.random() < 0.5)
        if add:
            worker = self.supervisor.add()
            return f"added worker {worker.slot} ({len(live) + 1} workers)"
        worker = self.rng.choice(live)
        status = self.supervisor.remove(worker)
        note = "" if status == 0 else f" EXIT {status}"
        return f"removed worker {worker.slot} ({len(live) - 1} left){note}"


def recover(
    cycle: Cycle,
    load: SteadyLoad,
    supervisor: Supervisor,
    monitor: WedgeMonitor,
    bound: float,
    echo: Callable[[str], None],
) -> tuple[LoadResult, Observation]:
    """Snapshot the clients, then cut (the input end offsets, read after the snapshot), then
    wait until the group committed past the cut and every worker is ready. Returns the
    snapshot and the observation that gave the cut."""
    healed = time.monotonic()
    acknowledged = load.snapshot()
    seen = monitor.wait_observation(after=time.monotonic(), timeout=HARD_LIMIT_S)
    if seen is None:
        raise RuntimeError(f"the group is not observable {HARD_LIMIT_S:.0f} s after the heal")
    cut = dict(seen.ends)
    caught = None
    last_note = healed
    while True:
        now = time.monotonic()
        last = monitor.last()
        if last is not None and last.at > seen.at and last.reached(cut) and supervisor.all_ready():
            caught = last.at
            break
        if now - healed > HARD_LIMIT_S:
            break
        if now - last_note > 30:
            last_note = now
            behind = {} if last is None else last.behind(cut)
            state = "-" if last is None else f"{last.state} {last.error[:120]}"
            echo(f"  still recovering after {now - healed:.0f}s: group {state}, behind {behind}")
        time.sleep(0.3)
    snap = load.snapshot()
    ok_after = snap.first_ok_after(healed)
    cycle.api_back_s = None if ok_after is None else max(0.0, ok_after - healed)
    if caught is None:
        cycle.recovery_s = None
        cycle.over_bound = True
    else:
        cycle.recovery_s = max(0.0, caught - healed)
        cycle.over_bound = cycle.recovery_s > bound
    return acknowledged, seen


def final_catch_up(
    supervisor: Supervisor, monitor: WedgeMonitor, bound: float, echo: Callable[[str], None]
) -> float | None:
    began = time.monotonic()
    seen = monitor.wait_observation(after=began, timeout=HARD_LIMIT_S)
    if seen is None:
        echo("  the group is not observable at the end")
        return None
    cut = dict(seen.ends)
    while time.monotonic() - began < HARD_LIMIT_S:
        last = monitor.last()
        if last is not None and last.at > seen.at and last.reached(cut):
            return last.at - began
        time.sleep(0.3)
    last = monitor.last()
    echo(f"  the group never caught up: behind {last.behind(cut) if last else '?'}")
    return None


def summarize(
    args: argparse.Namespace,
    seed: int,
    cycles: list[Cycle],
    final: CheckResult,
    final_s: float | None,
    supervisor: Supervisor,
    monitor: WedgeMonitor,
    result: Any,
) -> dict[str, Any]:
    kinds = Counter(c.kind for c in cycles)
    exits = supervisor.counts()
    recoveries = [c.recovery_s for c in cycles if c.recovery_s is not None]
    per_kind = {}
    for kind in kinds:
        values = [c.recovery_s for c in cycles if c.kind == kind and c.recovery_s is not None]
        if values:
            per_kind[kind] = {
                "median_s": round(statistics.median(values), 1),
                "max_s": round(max(values), 1),
            }
    transient_no_fate = sum(1 for c in cycles if c.check.without_fate)
    over = [c.n for c in cycles if c.over_bound]
    summary: dict[str, Any] = {
        "cluster": args.cluster,
        "seed": seed,
        "rate": args.rate,
        "cycles": len(cycles),
        "faults": dict(kinds),
        "rebalances": Counter(c.detail.split()[0] for c in cycles if c.kind == "rebalance"),
        "wedges": len(monitor.wedges),
        "no_progress": no_progress_incidents(monitor.stalls, monitor.t0),
        "no_progress_longest_s": round(max((e.seconds for e in monitor.stalls), default=0), 1),
        "restarts_75": exits.get("75", 0),
        "crashes": exits.get("crash", 0),
        "unclean_stops": [
            f"worker {e.slot} pid {e.pid} exit {e.status}: {e.line}"
            for e in supervisor.exits
            if e.cause == "removed" and e.status != 0
        ],
        "wedge_kills": exits.get("wedge-kill", 0),
        "max_recovery_s": round(max(recoveries), 1) if recoveries else None,
        "recovery_by_kind": per_kind,
        "catchup_bound_s": args.catchup,
        "over_bound_cycles": over,
        "never_recovered": [c.n for c in cycles if c.recovery_s is None],
        "final_catch_up_s": None if final_s is None else round(final_s, 1),
        "lost": final.lost,
        "duplicated": final.duplicated,
        "without_fate": len(final.without_fate),
        "cycles_with_report_not_yet_fated": transient_no_fate,
        "rejected_acknowledged": len(final.rejected_acknowledged),
        "undecodable": len(final.undecodable),
        "acknowledged": {"receipts": len(result.receipts), "reports": len(result.reports)},
        "load_errors": dict(result.errors),
        "problems": final.problems(),
        "cycle_lines": [c.line() for c in cycles],
        "exit_lines": [
            f"worker {e.slot} pid {e.pid} exit {e.status} ({e.cause}): {e.line}"
            for e in supervisor.exits
            if e.cause in ("75", "crash", "wedge-kill")
        ],
        "wedge_lines": [w.describe() for w in monitor.wedges],
    }
    summary["failed"] = bool(
        summary["wedges"]
        or summary["no_progress"]
        or final.lost
        or final.duplicated
        or final.without_fate
        or final.rejected_acknowledged
        or over
        or summary["crashes"]
        or summary["unclean_stops"]
        or final_s is None
    )
    return summary


def print_table(
    s: dict[str, Any], supervisor: Supervisor, monitor: WedgeMonitor, echo: Callable[[str], None]
) -> None:
    faults = ", ".join(f"{k} {v}" for k, v in sorted(s["faults"].items()))
    rebal = ", ".join(f"{k} {v}" for k, v in sorted(s["rebalances"].items()))
    header = (
        "| cluster | cycles | faults by kind | wedges | no-progress incidents (longest) | "
        "restarts (exit 75) | crashes | max recovery | lost | duplicated |"
    )
    row = (
        f"| {s['cluster']} | {s['cycles']} | {faults}{f' ({rebal})' if rebal else ''} | "
        f"{s['wedges']} | {len(s['no_progress'])} ({s['no_progress_longest_s']} s) | "
        f"{s['restarts_75']} | {s['crashes']} | "
        f"{s['max_recovery_s']} s | {s['lost']} | {s['duplicated']} |"
    )
    lines = [
        "",
        f"STREAMS-CHAOS seed {s['seed']}, {s['rate']:g} req/s, "
        f"acknowledged {s['acknowledged']['receipts']} receipts + "
        f"{s['acknowledged']['reports']} reports",
        header,
        "|" + "---|" * (header.count("|") - 1),
        row,
        "",
        f"recovery by kind (heal -> group past the cut): {s['recovery_by_kind']}",
        f"cycles over the {s['catchup_bound_s']:.0f}s bound: {s['over_bound_cycles'] or 'none'}; "
        f"never recovered: {s['never_recovered'] or 'none'}; "
        f"final catch-up {s['final_catch_up_s']} s",
        f"reports without a fate at the end: {s['without_fate']}; cycles where a report below "
        f"the cut had no fate yet: {s['cycles_with_report_not_yet_fated']}; acknowledged "
        f"reports rejected: {s['rejected_acknowledged']}",
        f"load errors (expected during broker faults): {s['load_errors']}",
        f"worker exits: {dict(supervisor.counts())}",
    ]
    reasons = Counter(line.split(": ", 1)[-1][-200:] for line in s["exit_lines"])
    lines += [f"  {n} x {reason}" for reason, n in reasons.most_common(10)]
    lines += [f"  removed worker did not stop cleanly: {u}" for u in s["unclean_stops"]]
    lines += [f"  wedge: {w}" for w in s["wedge_lines"]]
    lines += [f"  no progress: {line}" for line in s["no_progress"]]
    lines.append("RESULT: " + ("FAILED" if s["failed"] else "ok"))
    for line in lines:
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
