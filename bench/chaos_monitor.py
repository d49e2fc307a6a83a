"""The group of bench/streams_chaos.py seen from outside: :class:`WedgeMonitor`.

Once a second (a thread): the group's state, which live worker process owns each input
partition, committed and end offsets (read_committed). A *wedge* is an input partition
owned by a live worker of a stable group, with records waiting (end offset > committed
offset) and the committed offset standing still for ``stall_s``: the rule of
:mod:`streams.watchdog`, computed here with no help from it. A wedge that lasts
``kill_after_s`` is ended with SIGKILL (the supervisor restarts it). A
:class:`NoProgress` is the same without the group's help.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from bench.chaos_workers import Echo, Supervisor, Worker

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
