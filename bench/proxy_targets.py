"""The servers bench/proxy_overhead.py measures: Reef from the work tree or from a git ref.

A baseline ref (``--baseline HEAD``) is exported with ``git archive`` into a temporary
folder and served by the same interpreter with that folder as its working directory, so
its processors child (``python -m reef.cli streams``) runs the baseline code too. Both
Reefs run side by side on the same machine, against the same upstream, in one run.

After the load, :func:`logged_receipts` reads back every ``InferenceRecorded`` id a
target's log holds: the durability check compares them with the receipts handed out.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from reef.codec import EventCodec
from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.log.base import EventLog
from reef.log.embedded import EmbeddedLog
from reef.log.kafka import KafkaLog
from reef.testing.servers import (
    REPO_ROOT,
    ManagedProcess,
    clean_env,
    free_port,
    reef_executable,
    wait_healthy,
)

HOST = "127.0.0.1"
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class ReefTarget:
    """A running ``reef serve`` and where its records go."""

    name: str
    base_url: str
    process: ManagedProcess
    state_dir: Path
    kafka: tuple[str, str] | None = None  # (bootstrap, topic prefix) on Kafka
    headers: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        self.process.stop(30.0)


def export_tree(ref: str) -> Path:
    """``git archive ref`` of this checkout, unpacked into a fresh temporary folder."""
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", ref],
        capture_output=True,
        check=True,
    ).stdout
    tree = Path(tempfile.mkdtemp(prefix="reef-baseline-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def create_topics(bootstrap: str) -> str:
    """A fresh topic prefix with Reef's topics created on ``bootstrap``."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    subprocess.run(
        [reef_executable(), "topics", "create", "--log", "kafka", *_kafka_flags(bootstrap, prefix)],
        check=True,
        capture_output=True,
    )
    return prefix


def _kafka_flags(bootstrap: str, prefix: str) -> list[str]:
    return ["--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]


def start_target(
    name: str,
    upstream_v1: str,
    *,
    token: str,
    workdir: Path,
    tree: Path | None = None,
    kafka_bootstrap: str | None = None,
    workers: int = 1,
    settings: dict[str, str] | None = None,
) -> ReefTarget:
    """``reef serve`` of ``tree`` (None: the work tree) on the embedded log or Kafka;
    ``settings`` are extra ``REEF_*`` variables."""
    port = free_port()
    state_dir = workdir / name
    args = ["serve", "--host", HOST, "--port", str(port), "--state-dir", str(state_dir)]
    args += ["--upstream-url", upstream_v1]
    if workers > 1:
        args += ["--workers", str(workers)]
    kafka = None
    if kafka_bootstrap is not None:
        kafka = (kafka_bootstrap, create_topics(kafka_bootstrap))
        args += ["--log", "kafka", *_kafka_flags(*kafka)]
    env = clean_env({"REEF_TOKEN": token, **(settings or {})})
    cwd = tree or REPO_ROOT
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    state_dir.mkdir(parents=True)
    out = (workdir / f"{name}.stdout.log").open("wb")
    err = (workdir / f"{name}.stderr.log").open("wb")
    argv = [sys.executable, "-m", "reef.cli", *args]
    proc = subprocess.Popen(
        argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd
    )
    managed = ManagedProcess(argv, proc, Path(out.name), Path(err.name))
    base_url = f"http://{HOST}:{port}"
    wait_healthy(managed, base_url, 90.0)
    headers = {"Authorization": f"Bearer {token}", "x-reef-scenario": "bench"}
    return ReefTarget(name, base_url, managed, state_dir, kafka, headers)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by ``pid`` and every live descendant.

    Robust where wall-clock is not: on a machine shared with other work, the CPU a
    request costs the server (its processors child included) barely moves.
    """
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = text.rpartition(")")[2].split()
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        times[child] = (int(fields[11]) + int(fields[12])) / _TICKS
    family = {pid}
    grew = True
    while grew:
        found = {child for child, parent in parents.items() if parent in family}
        grew = not found <= family
        family |= found
    return sum(times.get(member, 0.0) for member in family)


def logged_receipts(target: ReefTarget) -> set[str]:
    """Ids of every exchange in ``target``'s log (read after the target stopped)."""
    return asyncio.run(_logged_receipts(target))


async def _logged_receipts(target: ReefTarget) -> set[str]:
    log: EventLog
    if target.kafka is None:
        log = EmbeddedLog(target.state_dir / "log.sqlite3")
    else:
        bootstrap, prefix = target.kafka
        log = KafkaLog(bootstrap, topic_prefix=prefix, client_id=f"bench-{os.getpid()}")
    codec = EventCodec()
    await log.start()
    try:
        ids = set()
        async for record in log.read(INFERENCE):
            event = codec.decode(record.value)
            if isinstance(event, InferenceRecorded) and event.complete:
                ids.add(event.event_id)
        return ids
    finally:
        await log.close()
