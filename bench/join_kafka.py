"""The Kafka-host runner of bench/join_throughput.py: backlog, processes, outputs.

A :class:`Backlog` written to a fresh topic prefix in one transaction (committed at
once, or once every process is Ready: *gated*), the processes of a row (:class:`Proc`:
a ``reef streams`` worker or an anchor, restarted after exit 75 as a supervisor would),
and :func:`kafka_run`, which times them until the expected outputs are read_committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.join_workload import PARTITIONS, REPO_ROOT
from reef.codec import EVENT_TYPE_HEADER
from reef.core import topics
from reef.core.topics import STREAMS_APP_ID
from reef.hosts import READY_LINE
from reef.log.base import PendingAppend
from reef.log.kafka import KafkaLog, delete_prefixed_topics
from streams.changelog import changelog_topic
from streams.host import EXIT_TRANSACTION_FAILED

#: logged by streams/task_manager.py after each assignment it took up
ASSIGNED = re.compile(rb"assigned partitions \[([\d, ]*)\]")


# -- Kafka: backlog, processes, outputs --------------------------------------------------


def kafka_bootstrap(given: str | None) -> str:
    if given:
        return given
    try:
        from reef_dev.stack import kafka
        from reef_dev.stack.paths import load_settings
    except ImportError:  # pragma: no cover - reef_dev.stack is part of the checkout
        raise SystemExit("reef_dev.stack is not available: pass --kafka-bootstrap") from None
    shape = kafka.up(load_settings(), "single", echo=lambda m: print(f"[stack] {m}"))
    return shape.bootstrap


class Backlog:
    """The workload written to a prefix's topics in one transaction, committed on demand
    (read_committed readers, Reef's host and both anchors, see none of it before)."""

    def __init__(self, bootstrap: str, prefix: str, pending: Sequence[PendingAppend]) -> None:
        self.prefix = prefix
        self.pending = pending
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=f"{prefix}bench-loader",
            transactional_id=f"{prefix}bench-loader",
            acks="all",
            enable_idempotence=True,
            compression_type="lz4",  # as KafkaLog writes
            linger_ms=5,
            max_batch_size=1024 * 1024,
            transaction_timeout_ms=600_000,
        )
        self.write_seconds = 0.0
        self.committed_at = 0.0

    async def write(self) -> None:
        began = time.perf_counter()
        await self.producer.start()
        await self.producer.begin_transaction()
        sent = [
            await self.producer.send(
                self.prefix + r.topic, r.value, key=r.key, headers=list(r.headers)
            )
            for r in self.pending
        ]
        await asyncio.gather(*sent)
        self.write_seconds = time.perf_counter() - began

    async def commit(self) -> float:
        self.committed_at = time.perf_counter()
        await self.producer.commit_transaction()
        await self.producer.stop()
        return self.committed_at

    async def abandon(self) -> None:
        with contextlib.suppress(Exception):
            await self.producer.stop()


@dataclass
class Progress:
    seen: int = 0
    kinds: Counter[str] = field(default_factory=Counter)


async def count_outputs(bootstrap: str, topic: str, expected: int, progress: Progress) -> None:
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
        while not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                await asyncio.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while progress.seen < expected:
            batches = await consumer.getmany(timeout_ms=100)
            for messages in batches.values():
                progress.seen += len(messages)
                for m in messages:
                    kind = dict(m.headers).get(EVENT_TYPE_HEADER) if m.headers else None
                    progress.kinds[kind.decode() if kind else "raw"] += 1
    finally:
        await consumer.stop()


@dataclass
class Proc:
    """A process of a Kafka row (a worker or an anchor), its output in a log file."""

    argv: list[str]
    log: Path
    ready_marker: bytes
    process: asyncio.subprocess.Process | None = None
    started: float = 0.0
    ready: float | None = None
    #: times a supervisor (this benchmark) restarted it after it exited with status 75
    restarts: int = 0
    _cpu_dead: float = 0.0  # CPU seconds of its earlier incarnations
    _cpu_last: float = 0.0  # last reading of the current one

    async def start(self, env: dict[str, str], *, again: bool = False) -> None:
        if again:
            self._cpu_dead += self._cpu_last
            self._cpu_last = 0.0
            self.restarts += 1
        with self.log.open("ab" if again else "wb") as output:
            if not again:
                self.started = time.perf_counter()
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO_ROOT,
            )

    def text(self) -> bytes:
        return self.log.read_bytes() if self.log.exists() else b""

    def poll_ready(self) -> bool:
        if self.ready is None and self.ready_marker in self.text():
            self.ready = time.perf_counter()
        return self.ready is not None

    def cpu_seconds(self) -> float:
        """user + system CPU time of the process (all its threads, every incarnation)."""
        if self.process is not None and self.process.returncode is None:
            try:
                stat = Path(f"/proc/{self.process.pid}/stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                ticks = int(fields[11]) + int(fields[12])
                self._cpu_last = ticks / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                pass  # exiting: keep the last reading
        return self._cpu_dead + self._cpu_last

    def exited(self) -> bool:
        return self.process is not None and self.process.returncode is not None

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(60):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


def group_settled(procs: Sequence[Proc]) -> bool:
    """Every worker's last logged assignment: together disjoint and all 6 partitions."""
    held: list[int] = []
    for proc in procs:
        found = ASSIGNED.findall(proc.text())
        if not found:
            return False
        held += [int(p) for p in found[-1].decode().split(",") if p.strip()]
    return len(held) == PARTITIONS and set(held) == set(range(PARTITIONS))


async def reef_diagnostics(bootstrap: str, prefix: str, procs: Sequence[Proc]) -> str:
    """What slowed a Reef row: reports parked (processed before the exchange they quote:
    the host merges inputs by timestamp only within one poll) and lost memberships."""
    log = KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-bench-diag")
    changelog = changelog_topic(STREAMS_APP_ID, "join")  # the prefix is the log's
    parked = biggest = 0
    with contextlib.suppress(Exception):
        async for record in log.read(changelog):
            if (record.key or b"").startswith(b'"parked/'):
                parked += 1
                biggest = max(biggest, len(record.value))
    expired = sum(p.text().count(b"Heartbeat session expired") for p in procs)
    assignments = sum(len(ASSIGNED.findall(p.text())) for p in procs)
    restarts = sum(p.restarts for p in procs)
    return (
        f"parked-list changelog writes {parked} (largest {biggest / 1024:.0f} KiB), "
        f"session expiries {expired}, assignments {assignments} (incl. startup), "
        f"restarts after exit 75: {restarts}"
    )


@dataclass
class KafkaRun:
    began: float  # first process started
    ready: float  # every process Ready (and the group settled)
    committed: float  # backlog visible (gated: after ready; else before began)
    done: float
    progress: Progress
    write_seconds: float
    logs: list[Path]
    cpu_at_start: float  # CPU seconds of the processes when the clock started (gated: commit)
    cpu_at_done: float

    @property
    def cpu(self) -> float:
        return self.cpu_at_done - self.cpu_at_start


async def kafka_run(
    bootstrap: str,
    prefix: str,
    pending: Sequence[PendingAppend],
    procs: Sequence[Proc],
    output: str,
    expected: int,
    *,
    gated: bool,
    settled: Callable[[Sequence[Proc]], bool] | None = None,
    extra_topics: Sequence[str] = (),
    limit_s: float = 600.0,
    supervise: bool = True,
) -> KafkaRun:
    """Topics of ``prefix``, the backlog, the processes; until ``expected`` outputs."""
    log = KafkaLog(bootstrap, topic_prefix=prefix, client_id="reef-bench-join")
    await log.ensure_topics([*topics.ALL_TOPICS, *extra_topics])
    backlog = Backlog(bootstrap, prefix, pending)
    await backlog.write()
    committed = await backlog.commit() if not gated else 0.0
    env = {k: v for k, v in os.environ.items() if not k.startswith("REEF_")}
    progress = Progress()
    counting = asyncio.create_task(count_outputs(bootstrap, prefix + output, expected, progress))
    try:
        for proc in procs:
            await proc.start(env)
        began = min(p.started for p in procs)
        deadline = began + limit_s
        ready = 0.0
        cpu_at_start = 0.0
        while True:
            if counting.done():
                counting.result()
                break
            for proc in procs:
                proc.cpu_seconds()  # keeps the last reading of a process about to exit
                if not proc.exited():
                    continue
                assert proc.process is not None
                if proc.process.returncode != EXIT_TRANSACTION_FAILED or not supervise:
                    raise RuntimeError(
                        f"{proc.argv[0]} exited early ({proc.process.returncode}); see {proc.log}"
                    )
                await proc.start(env, again=True)  # as a supervisor restarts a worker
            if time.perf_counter() > deadline:
                raise TimeoutError(f"not all {expected} outputs within {limit_s:.0f} s")
            if (
                not ready
                and all(p.poll_ready() for p in procs)
                and (settled is None or settled(procs))
            ):
                ready = time.perf_counter()
                cpu_at_start = sum(p.cpu_seconds() for p in procs)
                if gated:
                    committed = await backlog.commit()
            await asyncio.sleep(0.02)
        done = time.perf_counter()
        cpu_at_done = sum(p.cpu_seconds() for p in procs)
    finally:
        counting.cancel()
        if gated and not backlog.committed_at:
            await backlog.abandon()
        await asyncio.gather(*(p.stop() for p in procs))
    if not ready:  # finished before the marker was seen (tiny runs)
        ready = max((p.ready or p.started) for p in procs)
    return KafkaRun(
        began,
        ready,
        committed,
        done,
        progress,
        backlog.write_seconds,
        [p.log for p in procs],
        cpu_at_start,
        cpu_at_done,
    )


def worker_proc(
    bootstrap: str, prefix: str, state_dir: Path, log: Path, profile_to: Path | None = None
) -> Proc:
    reef = Path(sys.executable).with_name("reef")
    command = (
        [str(reef)]
        if profile_to is None
        else [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "reef.cli"]
    )
    argv = [
        *command,
        "streams",
        "--log",
        "kafka",
        "--kafka-bootstrap",
        bootstrap,
        "--kafka-topic-prefix",
        prefix,
        "--state-dir",
        str(state_dir),
        "--loglevel",
        "info",
    ]
    return Proc(argv, log, READY_LINE.encode())


def fresh_prefix(kind: str) -> str:
    return f"bench-join-{kind}-{uuid.uuid4().hex[:8]}-"


async def cleanup(bootstrap: str, *prefixes: str) -> None:
    for prefix in prefixes:
        with contextlib.suppress(Exception):
            await delete_prefixed_topics(bootstrap, prefix)
