"""The moving parts of ``bench/streams_chaos.py``.

* :class:`PrivateKafka`: a single node or a three-node cluster of the bench's own, on free
  ports under a temporary root (never the shared stack other tests use), with SIGSTOP /
  SIGCONT / SIGKILL / restart of one node;
* :class:`Supervisor`: ``reef streams`` workers, each with a distinct ``--instance-id``,
  restarted when they exit on their own (status 75: the host gave up on a transaction or
  its watchdog ended it; any other status is a crash and counted apart);
* :class:`WedgeMonitor`: the group seen from outside, once a second (its state, which live
  worker process owns each input partition, committed and end offsets, read_committed).
  A *wedge* is an input partition owned by a live worker of a stable group, with records
  waiting (end offset > committed offset) and the committed offset standing still for
  ``stall_s``: the rule of :mod:`streams.watchdog`, computed here with no help from it.
  A wedge that lasts ``kill_after_s`` is ended with SIGKILL (the supervisor restarts it);
* :class:`Ledger`: reads the log incrementally and checks what the clients were told
  against it (every acknowledged receipt and report on the log, one fate per report, no
  sample twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from reef.core import topics
from reef.core.events import InferenceRecorded, ReportRejected, ReportSubmitted, SampleJoined
from reef.hosts import READY_LINE
from reef.log.kafka import KafkaLog
from reef.services.eventstore import EventStore
from reef.stack import kafka as stack_kafka
from reef.stack import process as stack_process
from reef.stack.paths import load_settings
from reef.testing.load import LoadResult
from reef.testing.servers import clean_env, free_port, reef_executable
from streams.host import EXIT_TRANSACTION_FAILED

Echo = Callable[[str], None]

#: the topics ``reef streams`` reads (the join: inference + reports; the chain: the rest)
INPUT_TOPICS = (topics.INFERENCE, topics.REPORTS, topics.SCENARIOS, topics.RELEASE_PROPOSALS)


def kafka_flags(bootstrap: str, prefix: str) -> list[str]:
    return ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]


# ---------------------------------------------------------------------------
# Kafka of the bench's own


class PrivateKafka:
    """``count`` combined broker+controller nodes on free ports under ``root``."""

    def __init__(self, root: Path, count: int, heap_mb: int = 384) -> None:
        self.settings = load_settings()
        install = stack_kafka.install_for(self.settings)
        shape = "single" if count == 1 else "cluster"
        ports: list[int] = []
        while len(ports) < 2 * count:
            port = free_port()
            if port not in ports:
                ports.append(port)
        nodes = tuple(
            stack_kafka.KafkaNode(
                shape=shape,
                node_id=i,
                broker_port=ports[2 * (i - 1)],
                controller_port=ports[2 * (i - 1) + 1],
                heap_mb=heap_mb,
                root=root / f"node-{i}",
                install=install,
            )
            for i in range(1, count + 1)
        )
        self.shape = stack_kafka.KafkaShape(name=shape, nodes=nodes, root=root)
        self.root = root

    @property
    def bootstrap(self) -> str:
        return self.shape.bootstrap

    @property
    def ids(self) -> list[int]:
        return [node.node_id for node in self.shape.nodes]

    def start(self, timeout: float = 300.0) -> None:
        for node in self.shape.nodes:
            stack_kafka.start_node(self.settings, self.shape, node)
        self.wait_all(timeout)

    def wait_all(self, timeout: float = 180.0) -> float:
        """Until every node answers metadata listing every node."""
        return stack_kafka.wait_for_brokers(
            [node.bootstrap for node in self.shape.nodes],
            set(self.ids),
            timeout=timeout,
            services=tuple(node.service for node in self.shape.nodes),
        )

    def pid(self, node_id: int) -> int:
        pid = self.shape.node(node_id).service.pid()
        if pid is None:
            raise RuntimeError(f"Kafka node {node_id} is not running")
        return pid

    def sigstop(self, node_id: int) -> None:
        os.kill(self.pid(node_id), signal.SIGSTOP)

    def sigcont(self, node_id: int) -> None:
        os.kill(self.pid(node_id), signal.SIGCONT)

    def kill(self, node_id: int) -> None:
        stack_process.kill(self.shape.node(node_id).service)

    def restart(self, node_id: int, timeout: float = 180.0) -> float:
        """Start a killed node again; seconds until every node lists every node."""
        began = time.monotonic()
        stack_kafka.start_node(self.settings, self.shape, self.shape.node(node_id))
        self.wait_all(timeout)
        return time.monotonic() - began

    def server_logs(self) -> list[Path]:
        return [node.logs_dir / "server.log" for node in self.shape.nodes]

    def close(self, keep_logs: Path | None = None) -> None:
        """Kill every node (SIGCONT first: a stopped one would not die), delete the data."""
        for node in self.shape.nodes:
            pid = node.service.pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            stack_process.kill(node.service)
        for node in self.shape.nodes:
            if keep_logs is not None and node.logs_dir.exists():
                target = keep_logs / f"kafka-node-{node.node_id}"
                shutil.copytree(node.logs_dir, target, dirs_exist_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------
# Supervised stream workers


@dataclass
class Exit:
    """One end of a worker process."""

    at: float
    slot: int
    pid: int
    status: int
    cause: str  # "75", "crash", "bench-kill", "wedge-kill", "removed"
    line: str  # its first CRITICAL line (else ERROR), for the report


@dataclass
class Worker:
    slot: int
    instance_id: str
    work_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    starts: int = 0
    #: the bench killed it and restarts it itself (the supervisor leaves it alone)
    held: bool = False
    #: why the bench ended it ("bench-kill", "wedge-kill", "removed"), until its exit is seen
    ending: str = ""
    retired: bool = False
    started_at: float = 0.0
    restart_at: float = 0.0  # when the supervisor restarts it (back-off)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def ready(self) -> bool:
        return self.alive() and READY_LINE in self.text()


def first_error_line(text: str) -> str:
    lines = text.splitlines()
    found = [ln for ln in lines if "[CRITICAL]" in ln] or [ln for ln in lines if "[ERROR]" in ln]
    if found:
        return found[0][:400]
    tb = [ln for ln in lines if ln and not ln.startswith((" ", "["))]
    return (tb[-1] if tb else "no error line")[:400]


class Supervisor:
    """Starts ``reef streams`` workers and restarts those that exit on their own."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        root: Path,
        env: Mapping[str, str],
        echo: Echo = print,
        restart_delay_s: float = 1.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.root = root
        self.env = dict(env)
        self.echo = echo
        self.restart_delay_s = restart_delay_s
        self.workers: list[Worker] = []
        self.exits: list[Exit] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="supervisor", daemon=True)
        self._slots = 0

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            for worker in self.workers:
                worker.retired = True
                self._terminate(worker, timeout=20.0)

    # -- the workers --------------------------------------------------------------------

    def live(self) -> list[Worker]:
        with self._lock:
            return [w for w in self.workers if not w.retired]

    def live_pids(self) -> dict[int, Worker]:
        with self._lock:
            return {w.pid: w for w in self.workers if w.pid is not None and w.alive()}

    def live_instances(self) -> dict[str, Worker]:
        """Instance id -> its worker, for the workers whose process is alive now."""
        with self._lock:
            return {w.instance_id: w for w in self.workers if w.alive()}

    def add(self) -> Worker:
        with self._lock:
            self._slots += 1
            slot = self._slots
            worker = Worker(slot, f"{self.prefix}worker-{slot}", self.root / f"worker-{slot}")
            self.workers.append(worker)
            self._spawn(worker)
            return worker

    def kill(self, worker: Worker, cause: str = "bench-kill", hold: bool = True) -> None:
        """SIGKILL; ``hold``: the bench restarts it (:meth:`restart`), else the supervisor."""
        with self._lock:
            worker.held = hold
            worker.ending = cause
            if worker.alive():
                assert worker.process is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGKILL)
                worker.process.wait(30)
            self._reap(worker)

    def restart(self, worker: Worker) -> None:
        with self._lock:
            worker.held = False
            if not worker.alive():
                self._reap(worker)
                self._spawn(worker)

    def remove(self, worker: Worker) -> int | None:
        """Stop a worker for good (SIGTERM: it leaves the group); its exit status."""
        with self._lock:
            worker.retired = True
            worker.ending = "removed"
        status = self._terminate(worker, timeout=30.0)  # not under the lock: it may take long
        with self._lock:
            self._reap(worker)
        return status

    def kill_pid(self, pid: int, cause: str) -> bool:
        """SIGKILL the worker running as ``pid`` (a wedge); the supervisor restarts it."""
        with self._lock:
            for worker in self.workers:
                if worker.pid == pid and worker.alive():
                    self.kill(worker, cause=cause, hold=False)
                    return True
        return False

    def all_ready(self) -> bool:
        return all(w.ready() for w in self.live())

    def worker_of(self, pid: int) -> Worker | None:
        with self._lock:
            for worker in self.workers:
                if worker.pid == pid:
                    return worker
        return None

    def exit_of(self, pid: int) -> Exit | None:
        with self._lock:
            for ended in self.exits:
                if ended.pid == pid:
                    return ended
        return None

    def forget(self, ended: Exit) -> None:
        """Count an exit apart (the wedge self-test's): "self-test" instead of its cause."""
        with self._lock:
            ended.cause = "self-test"

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(e.cause for e in self.exits)

    # -- internals -----------------------------------------------------------------------

    def _spawn(self, worker: Worker) -> None:
        worker.starts += 1
        worker.ending = ""
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        argv = [reef_executable(), "streams", *kafka_flags(self.bootstrap, self.prefix)]
        argv += ["--instance-id", worker.instance_id, "--loglevel", "info"]
        path = self.root / f"worker-{worker.slot}-start-{worker.starts}.log"
        with path.open("wb") as out:
            worker.process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=clean_env(self.env),
                cwd=worker.work_dir,
            )
        worker.log_path = path
        worker.started_at = time.monotonic()

    def _terminate(self, worker: Worker, timeout: float) -> int | None:
        if worker.process is None:
            return None
        if worker.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
            try:
                worker.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.echo(f"  worker {worker.slot} ignored SIGTERM for {timeout:.0f} s: SIGKILL")
                worker.process.kill()
                worker.process.wait(30)
        return worker.process.returncode

    def _reap(self, worker: Worker) -> None:
        """Record the exit of a worker's current process (once)."""
        process = worker.process
        if process is None or process.poll() is None:
            return
        if any(e.pid == process.pid for e in self.exits):
            return
        status = process.returncode
        if worker.ending:
            cause = worker.ending
        elif status == EXIT_TRANSACTION_FAILED:
            cause = "75"
        else:
            cause = "crash"
        line = first_error_line(worker.text())
        self.exits.append(Exit(time.monotonic(), worker.slot, process.pid, status, cause, line))
        if cause in ("75", "crash"):
            self.echo(
                f"  [supervisor] worker {worker.slot} (pid {process.pid}) exited {status} "
                f"({cause}): {line}"
            )

    def _main(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                now = time.monotonic()
                for worker in self.workers:
                    if worker.retired or worker.held or worker.alive():
                        continue
                    if worker.process is not None and not any(
                        e.pid == worker.process.pid for e in self.exits
                    ):
                        self._reap(worker)
                        worker.restart_at = now + self.restart_delay_s
                        continue
                    if now >= worker.restart_at:
                        self._spawn(worker)


# ---------------------------------------------------------------------------
# The group, seen from outside


@dataclass
class Observation:
    at: float
    ok: bool
    error: str = ""
    state: str = ""
    members: int = 0
    #: input partition -> instance id of the (static) member that holds it
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    ends: dict[TopicPartition, int] = field(default_factory=dict)

    def lag(self) -> int:
        return sum(max(0, end - self.committed.get(tp, 0)) for tp, end in self.ends.items())

    def reached(self, cut: Mapping[TopicPartition, int]) -> bool:
        return self.ok and all(self.committed.get(tp, 0) >= off for tp, off in cut.items())

    def behind(self, cut: Mapping[TopicPartition, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for tp, off in cut.items():
            missing = off - self.committed.get(tp, 0)
            if missing > 0:
                out[f"{tp.topic.rsplit('.', 1)[-1]}[{tp.partition}]"] = missing
        return out


@dataclass
class Wedge:
    at: float
    partition: TopicPartition
    committed: int
    end: int
    pid: int
    slot: int
    seconds: float
    state: str
    log_tail: str
    #: how it ended: "progressed", "exit 75 (product watchdog)", "killed by the bench", ...
    outcome: str = "open"

    def describe(self) -> str:
        return (
            f"{self.partition.topic}[{self.partition.partition}] owned by worker {self.slot} "
            f"(pid {self.pid}, alive, group {self.state}): {self.end - self.committed} "
            f"records wait after offset {self.committed}, nothing committed for "
            f"{self.seconds:.0f} s -> {self.outcome}"
        )


@dataclass
class NoProgress:
    """The spec's literal rule, on one input partition: records wait, a worker process is
    alive (the partition's owner when the group names one, else any: a rebalance that does
    not end counts), and the committed offset stands still for ``stall_s`` or more. Unlike
    a :class:`Wedge` it holds whatever the group's state: a stuck or slow rebalance too."""

    partition: TopicPartition
    start: float  # monotonic: since when the committed offset stood
    committed: int
    seconds: float = 0.0
    states: set[str] = field(default_factory=set)
    owners: set[str] = field(default_factory=set)

    @property
    def end(self) -> float:
        return self.start + self.seconds


def no_progress_incidents(events: Sequence[NoProgress], t0: float) -> list[str]:
    """Overlapping per-partition events merged into incidents, one line each."""
    out: list[str] = []
    group: list[NoProgress] = []

    def flush() -> None:
        if not group:
            return
        start = min(e.start for e in group)
        longest = max(e.seconds for e in group)
        states = sorted(set().union(*(e.states for e in group)))
        owners = sorted(set().union(*(e.owners for e in group)))
        names = sorted(
            f"{e.partition.topic.rsplit('.', 1)[-1]}[{e.partition.partition}]" for e in group
        )
        out.append(
            f"at {start - t0:.0f}s: {len(group)} partition(s) {names[:8]} without a commit for "
            f"up to {longest:.0f} s; group {states}; owners {owners}"
        )

    for event in sorted(events, key=lambda e: e.start):
        if group and event.start > max(e.end for e in group):
            flush()
            group = []
        group.append(event)
    flush()
    return out


def instance_of(member_id: str) -> str | None:
    """The instance id of a static member: the coordinator names it ``<instance>-<uuid4>``.

    (Not the client id: when a static member is replaced, e.g. a killed worker restarted
    with the same instance id, the coordinator keeps the old member's client id, which
    names the dead process.)"""
    if len(member_id) > 37 and member_id[-37] == "-":
        return member_id[:-37]
    return None


class WedgeMonitor:
    """Once a second: the group's state, owners, committed and end offsets (a thread)."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        input_topics: Sequence[str],
        partitions: int,
        supervisor: Supervisor,
        *,
        stall_s: float = 10.0,
        kill_after_s: float = 45.0,
        echo: Echo = print,
        log_path: Path | None = None,
    ) -> None:
        self.log_path = log_path
        self.t0 = time.monotonic()
        self.stalls: list[NoProgress] = []
        self._stall_since: dict[TopicPartition, tuple[int, float]] = {}
        self._open_stalls: dict[TopicPartition, NoProgress] = {}
        self.bootstrap = bootstrap
        self.group = group
        self.tps = [TopicPartition(t, p) for t in input_topics for p in range(partitions)]
        self.supervisor = supervisor
        self.stall_s = stall_s
        self.kill_after_s = kill_after_s
        self.echo = echo
        self.wedges: list[Wedge] = []
        self.latest: Observation | None = None
        self.history: deque[Observation] = deque(maxlen=600)
        self._paused = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="wedge-monitor", daemon=True)
        #: partition -> ((committed, pid), since)
        self._since: dict[TopicPartition, tuple[tuple[int, int], float]] = {}
        self._open: dict[tuple[TopicPartition, int, int], Wedge] = {}
        self._last_look = 0.0

    def start(self) -> WedgeMonitor:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(20)

    @contextlib.contextmanager
    def paused(self) -> Any:
        """No wedge clock runs inside (a broker is stopped or dead: nobody can commit)."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                self._since.clear()

    def wait_observation(self, after: float, timeout: float) -> Observation | None:
        """The first successful observation that began after ``after``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                seen = self.latest
            if seen is not None and seen.ok and seen.at > after:
                return seen
            time.sleep(0.2)
        return None

    def last(self) -> Observation | None:
        with self._lock:
            return self.latest

    # -- the thread ------------------------------------------------------------------------

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        clients: tuple[AIOKafkaAdminClient, AIOKafkaConsumer] | None = None
        failures = 0
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    if clients is None:
                        clients = await self._clients()
                    seen = await self._observe(*clients, began)
                    failures = 0
                except Exception as exc:
                    seen = Observation(began, False, f"{type(exc).__name__}: {exc}"[:300])
                    failures += 1
                    if clients is not None and failures >= 3:
                        await self._close_clients(clients)
                        clients = None
                with self._lock:
                    self.latest = seen
                    self.history.append(seen)
                self._judge(seen)
                self._record(seen)
                await asyncio.sleep(max(0.05, 1.0 - (time.monotonic() - began)))
        finally:
            if clients is not None:
                await self._close_clients(clients)

    async def _clients(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, client_id="chaos-monitor", request_timeout_ms=5000
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id="chaos-monitor",
            isolation_level="read_committed",
            enable_auto_commit=False,
            request_timeout_ms=5000,
        )
        try:
            await asyncio.wait_for(admin.start(), 10)
            await asyncio.wait_for(consumer.start(), 10)
        except BaseException:
            await self._close_clients((admin, consumer))
            raise
        return admin, consumer

    @staticmethod
    async def _close_clients(clients: tuple[AIOKafkaAdminClient, AIOKafkaConsumer]) -> None:
        admin, consumer = clients
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.stop(), 10)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), 10)

    async def _observe(
        self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, began: float
    ) -> Observation:
        (response,) = await asyncio.wait_for(admin.describe_consumer_groups([self.group]), 5)
        (group,) = response.to_object()["groups"]
        owners: dict[TopicPartition, str] = {}
        for member in group["members"]:
            instance = instance_of(member["member_id"])
            raw = member["member_assignment"]
            if instance is None or not raw:
                continue
            for tp in ConsumerProtocolMemberAssignment.decode(raw).partitions():
                owners[TopicPartition(tp.topic, tp.partition)] = instance
        offsets = await asyncio.wait_for(admin.list_consumer_group_offsets(self.group), 5)
        committed = {
            TopicPartition(tp.topic, tp.partition): max(0, meta.offset)
            for tp, meta in offsets.items()
        }
        ends = await asyncio.wait_for(consumer.end_offsets(self.tps), 5)
        return Observation(
            began,
            True,
            state=group["state"],
            members=len(group["members"]),
            owners=owners,
            committed=committed,
            ends={TopicPartition(tp.topic, tp.partition): int(o) for tp, o in ends.items()},
        )

    def _record(self, seen: Observation) -> None:
        """One line per observation (``observations.jsonl``), for the analysis after."""
        if self.log_path is None:
            return
        line = {
            "t": round(seen.at - self.t0, 2),
            "ok": seen.ok,
            "state": seen.state,
            "members": seen.members,
            "lag": seen.lag() if seen.ok else None,
            "paused": bool(self._paused),
            "behind": {
                f"{tp.topic.rsplit('.', 1)[-1]}[{tp.partition}]": end - seen.committed.get(tp, 0)
                for tp, end in seen.ends.items()
                if end > seen.committed.get(tp, 0)
            },
            "owners": sorted(set(seen.owners.values())),
        }
        if seen.error:
            line["error"] = seen.error
        with self.log_path.open("a") as out:
            out.write(json.dumps(line) + "\n")

    def _no_progress(self, seen: Observation, live: Mapping[str, Worker]) -> None:
        """The literal rule (see :class:`NoProgress`)."""
        now = seen.at
        for tp in self.tps:
            end = seen.ends.get(tp)
            done = seen.committed.get(tp, 0)
            owner_id = seen.owners.get(tp)
            owner = live.get(owner_id) if owner_id else None
            # an owner named by the group must be alive (a killed worker keeps its static
            # membership until it is back: that is no stall of a live process)
            responsible = owner is not None or (owner_id is None and bool(live))
            if end is None or done >= end or not responsible:
                self._open_stalls.pop(tp, None)
                self._stall_since.pop(tp, None)
                continue
            first = self._stall_since.get(tp)
            if first is None or first[0] != done:
                self._open_stalls.pop(tp, None)
                self._stall_since[tp] = (done, now)
                continue
            stood = now - first[1]
            if stood < self.stall_s:
                continue
            event = self._open_stalls.get(tp)
            if event is None:
                event = NoProgress(tp, first[1], done)
                self._open_stalls[tp] = event
                self.stalls.append(event)
            event.seconds = stood
            event.states.add(seen.state or "?")
            event.owners.add(f"worker {owner.slot}" if owner is not None else "none")

    def _judge(self, seen: Observation) -> None:
        """The wedge rule on one observation."""
        now = seen.at
        with self._lock:
            starved = self._last_look and now - self._last_look > self.stall_s / 2
            self._last_look = now
            if self._paused or not seen.ok or starved:
                self._since.clear()
                self._stall_since.clear()
                self._open_stalls.clear()
                return
        live = self.supervisor.live_instances()
        self._no_progress(seen, live)
        pids = {w.pid for w in live.values()}
        for key, wedge in list(self._open.items()):
            tp, committed, pid = key
            if seen.committed.get(tp, 0) > committed:
                wedge.outcome = "progressed on its own"
                del self._open[key]
            elif pid not in pids:
                ended = self.supervisor.exit_of(pid)
                if ended is None:
                    wedge.outcome = "worker gone"
                elif ended.cause == "75":
                    wedge.outcome = f"exit 75 ({ended.line[-160:]})"
                elif ended.cause == "wedge-kill":
                    wedge.outcome = f"killed by the bench after {self.kill_after_s:.0f} s"
                else:
                    wedge.outcome = f"worker ended: {ended.cause} {ended.status}"
                del self._open[key]
        for tp in self.tps:
            end = seen.ends.get(tp)
            done = seen.committed.get(tp, 0)
            worker = live.get(seen.owners.get(tp, ""))
            if end is None or done >= end or seen.state != "Stable" or worker is None:
                self._since.pop(tp, None)
                continue
            pid = worker.pid
            assert pid is not None
            key = (done, pid)
            first = self._since.get(tp)
            if first is None or first[0] != key:
                self._since[tp] = (key, now)
                continue
            stood = now - first[1]
            open_key = (tp, done, pid)
            if stood >= self.stall_s and open_key not in self._open:
                wedge = Wedge(
                    time.monotonic(),
                    tp,
                    done,
                    end,
                    pid,
                    worker.slot,
                    stood,
                    seen.state,
                    "\n".join(worker.text().splitlines()[-40:]),
                )
                self.wedges.append(wedge)
                self._open[open_key] = wedge
                self.echo(f"  [monitor] WEDGE {wedge.describe()}")
            if stood >= self.kill_after_s and open_key in self._open:
                self.echo(f"  [monitor] worker pid {pid} still wedged after {stood:.0f} s: SIGKILL")
                self.supervisor.kill_pid(pid, "wedge-kill")
                self._since.pop(tp, None)


# ---------------------------------------------------------------------------
# The log against the clients


@dataclass
class CheckResult:
    lost_receipts: list[str] = field(default_factory=list)
    lost_reports: list[str] = field(default_factory=list)
    #: reports below the cut (the group committed past them) with no fate yet
    without_fate: list[str] = field(default_factory=list)
    several_fates: dict[str, int] = field(default_factory=dict)
    rejected_acknowledged: dict[str, str] = field(default_factory=dict)
    duplicate_sample_ids: int = 0
    receipts_in_two_samples: int = 0
    undecodable: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return len(self.lost_receipts) + len(self.lost_reports)

    @property
    def duplicated(self) -> int:
        return self.duplicate_sample_ids + self.receipts_in_two_samples + len(self.several_fates)

    def problems(self) -> list[str]:
        out = []
        if self.lost_receipts:
            shown = self.lost_receipts[:5]
            out.append(f"{len(self.lost_receipts)} receipts not in the log: {shown}")
        if self.lost_reports:
            out.append(f"{len(self.lost_reports)} reports not in the log: {self.lost_reports[:5]}")
        if self.without_fate:
            out.append(f"{len(self.without_fate)} reports without a fate: {self.without_fate[:5]}")
        if self.several_fates:
            out.append(f"reports with several fates: {list(self.several_fates.items())[:5]}")
        if self.rejected_acknowledged:
            shown = list(self.rejected_acknowledged.items())[:5]
            out.append(f"{len(self.rejected_acknowledged)} good reports rejected: {shown}")
        if self.duplicate_sample_ids or self.receipts_in_two_samples:
            out.append(
                f"duplicates: {self.duplicate_sample_ids} sample ids, "
                f"{self.receipts_in_two_samples} receipts in two samples"
            )
        if self.undecodable:
            out.append(f"undecodable records: {self.undecodable[:5]}")
        return out


class Ledger:
    """What the log holds so far, read a little more each time (read_committed)."""

    TOPICS = (topics.INFERENCE, topics.REPORTS, topics.SAMPLES)

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.positions: dict[str, dict[int, int]] = {t: {} for t in self.TOPICS}
        self.recorded: set[str] = set()
        #: (scenario, report id) -> (partition, offset) of its first ReportSubmitted
        self.reports: dict[tuple[str, str], tuple[int, int]] = {}
        self.fates: Counter[tuple[str, str]] = Counter()
        self.rejected: dict[str, str] = {}
        self.sample_ids: Counter[str] = Counter()
        self.receipt_samples: Counter[str] = Counter()
        self.undecodable: list[str] = []
        self.records = 0

    def update(self) -> float:
        """Read every topic to its end now; seconds it took."""
        began = time.monotonic()
        asyncio.run(self._update())
        return time.monotonic() - began

    async def _update(self) -> None:
        log = KafkaLog(
            self.bootstrap,
            topic_prefix=self.prefix,
            client_id="chaos-ledger",
            request_timeout_ms=15000,
        )
        store = EventStore(log)
        for topic in self.TOPICS:
            ends = await log.end_offsets(topic)
            start = self.positions[topic]
            async for stored in store.read(topic, start=dict(start), until=ends):
                self.records += 1
                record = stored.record
                event = stored.event
                if event is None:
                    self.undecodable.append(
                        f"{topic}/{record.partition}@{record.offset}: {stored.error}"
                    )
                    continue
                if isinstance(event, InferenceRecorded):
                    if event.complete:
                        self.recorded.add(event.event_id)
                elif isinstance(event, ReportSubmitted):
                    self.reports.setdefault(
                        (event.scenario, event.event_id), (record.partition, record.offset)
                    )
                elif isinstance(event, SampleJoined | ReportRejected):
                    self.fates[(event.scenario, event.report_id)] += 1
                    if isinstance(event, ReportRejected):
                        self.rejected[event.report_id] = event.reason
                    else:
                        self.sample_ids[event.event_id] += 1
                        if self.sample_ids[event.event_id] == 1:
                            for receipt in event.references:
                                self.receipt_samples[receipt] += 1
            self.positions[topic] = dict(ends)

    def check(self, load: LoadResult, report_cut: Mapping[int, int] | None) -> CheckResult:
        """Acknowledged -> on the log; reports below ``report_cut`` (partition -> offset;
        None: all of them) have one fate; no sample twice."""
        out = CheckResult(undecodable=list(self.undecodable))
        out.lost_receipts = sorted(set(load.receipts) - self.recorded)
        submitted = self.reports
        out.lost_reports = sorted(r for r, s in load.reports.items() if (s, r) not in submitted)
        for (scenario, report), (partition, offset) in submitted.items():
            below = report_cut is None or offset < report_cut.get(partition, 0)
            if below and self.fates[(scenario, report)] == 0:
                out.without_fate.append(f"{scenario}/{report}@{partition}:{offset}")
        out.several_fates = {f"{s}/{r}": n for (s, r), n in self.fates.items() if n > 1}
        out.rejected_acknowledged = {
            r: reason for r, reason in self.rejected.items() if r in load.reports
        }
        out.duplicate_sample_ids = sum(n - 1 for n in self.sample_ids.values() if n > 1)
        out.receipts_in_two_samples = sum(1 for n in self.receipt_samples.values() if n > 1)
        return out


def cut_for(seen: Observation, topic: str) -> dict[int, int]:
    """Partition -> end offset of one (prefixed) topic in an observation."""
    return {tp.partition: off for tp, off in seen.ends.items() if tp.topic == topic}


def tail_lines(paths: Iterable[Path], lines: int = 30) -> str:
    out = []
    for path in paths:
        text = stack_process.tail(path, lines)
        out.append(f"--- {path}\n{text}")
    return "\n".join(out)
