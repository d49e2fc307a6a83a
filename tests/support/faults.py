"""What the fault suite (tests/faults/) shares: the fault table it reports into, ``reef
streams`` workers on Kafka that tests kill and restart, and Reef processes and API calls
as the fault tests use them.

* :class:`FaultTable`: ``record(FaultRow)`` prints one ``FAULT-TABLE`` line and appends
  the row (JSON) to ``<tmp>/reef-faults/fault-table.jsonl``.
* :class:`StreamsWorker`: ``reef streams`` on Kafka in its own work dir, killable.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from reef.core import topics
from reef.hosts import READY_LINE
from reef.log.kafka import KafkaLog
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    UpstreamProcess,
    clean_env,
    reef_executable,
    start_reef,
)
from tests.support.streams import spawn_in

TABLE_FILE = Path(tempfile.gettempdir()) / "reef-faults" / "fault-table.jsonl"

#: a killed worker's static membership comes back at once; its session expires quickly;
#: a worker whose input waits with no progress for 15 s exits (streams.watchdog)
STREAMS_ENV = {"REEF_STREAMS_SESSION_TIMEOUT_S": "6", "REEF_STREAMS_STALL_TIMEOUT_S": "15"}
#: a supervised worker whose lag does not move for this long is killed and restarted (a
#: backstop for the worker's own watchdog: a "wedged" crash means the watchdog missed it)
STUCK_SECONDS = 45.0


@dataclass(frozen=True)
class FaultRow:
    fault: str
    load_rps: float  # requests offered per second during the fault
    acknowledged: int  # receipts + reports acknowledged over the whole test
    lost: int
    duplicated: int
    recover_s: float
    notes: str = ""

    def line(self) -> str:
        return (
            f"FAULT-TABLE | {self.fault} | {self.load_rps:.1f} req/s | "
            f"{self.acknowledged} acknowledged | lost {self.lost} | "
            f"duplicated {self.duplicated} | recovered in {self.recover_s:.1f} s | {self.notes}"
        )


@dataclass
class FaultTable:
    path: Path
    echo: Callable[[str], None] = print
    rows: list[FaultRow] = field(default_factory=list)

    def record(self, row: FaultRow) -> None:
        self.rows.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps({**asdict(row), "at": time.strftime("%FT%T")}) + "\n")
        self.echo(row.line())


def kafka_flags(bootstrap: str, prefix: str) -> list[str]:
    return ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]


def kafka_log_factory(bootstrap: str, prefix: str) -> Callable[[], KafkaLog]:
    return lambda: KafkaLog(
        bootstrap, topic_prefix=prefix, client_id="reef-fault-check", request_timeout_ms=10000
    )


@dataclass
class StreamsWorker:
    """``reef streams`` on Kafka, in its own work dir; killed and restarted by tests."""

    bootstrap: str
    prefix: str
    work_dir: Path
    managed: ManagedProcess | None = None
    starts: int = 0
    env: dict[str, str] = field(default_factory=lambda: dict(STREAMS_ENV))
    #: why the worker exited on its own (each time ``supervise`` restarted it)
    crashes: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        argv = [reef_executable(), "streams", *kafka_flags(self.bootstrap, self.prefix)]
        argv += ["--instance-id", f"{self.prefix}worker", "--loglevel", "info"]
        self.managed = spawn_in(argv, self.work_dir, f"streams-{self.starts}", clean_env(self.env))

    def text(self) -> str:
        assert self.managed is not None
        return self.managed.stdout_text() + self.managed.stderr_text()

    def wait_ready(self, timeout: float = 90.0) -> float:
        assert self.managed is not None
        began = time.monotonic()
        while READY_LINE not in self.text():
            assert self.managed.running(), f"reef streams exited\n{self.managed.output()}"
            assert time.monotonic() - began < timeout, (
                f"reef streams not ready in {timeout:.0f}s\n{self.managed.output()}"
            )
            time.sleep(0.2)
        return time.monotonic() - began

    def kill(self) -> None:
        assert self.managed is not None
        if self.managed.running():
            os.kill(self.managed.pid, signal.SIGKILL)
        self.managed.process.wait(30)

    def running(self) -> bool:
        return self.managed is not None and self.managed.running()

    def supervise(self, max_crashes: int = 2) -> None:
        """What a process supervisor does: restart a worker that exited on its own
        (its last error line is kept in ``crashes``); fail past ``max_crashes``."""
        if self.running():
            return
        if not (self.crashes and self.crashes[-1].startswith("wedged")):
            lines = self.text().splitlines()
            errors = [line for line in lines if "[CRITICAL]" in line] or [
                line for line in lines if "[ERROR]" in line
            ]
            self.crashes.append(errors[0][:300] if errors else "exited without an error line")
        assert len(self.crashes) <= max_crashes, (
            f"reef streams keeps crashing: {self.crashes}\n{self.text()[-4000:]}"
        )
        self.start()
        self.wait_ready()

    def stop(self) -> None:
        if self.managed is not None:
            self.managed.stop(timeout=20)

    def wait_caught_up(self, timeout: float = 60.0, *, supervised: bool = False) -> float:
        """Until the worker's group committed every input record; seconds it took.
        ``supervised``: a worker that exits meanwhile is restarted (see ``supervise``)."""
        group = topics.STREAMS_APP_ID  # the log prefixes groups like topics
        inputs = (topics.SCENARIOS, topics.INFERENCE, topics.REPORTS, topics.RELEASE_PROPOSALS)

        async def behind() -> dict[str, dict[int, int]]:
            log = kafka_log_factory(self.bootstrap, self.prefix)()
            await log.start()
            try:
                out = {}
                for topic in inputs:
                    ends = await log.end_offsets(topic)
                    done = await log.committed(group, topic)
                    lags = {p: end - done.get(p, 0) for p, end in ends.items()}
                    if any(lags.values()):
                        out[topic] = {p: lag for p, lag in lags.items() if lag}
                return out
            finally:
                await log.close()

        began = time.monotonic()
        last_lag, moved_at = -1, began
        while lagging := asyncio.run(behind()):
            lag = sum(sum(by_partition.values()) for by_partition in lagging.values())
            if lag != last_lag:
                last_lag, moved_at = lag, time.monotonic()
            if supervised and time.monotonic() - moved_at > STUCK_SECONDS and self.running():
                # a liveness probe on the lag: Ready, alive, and no progress at all
                self.crashes.append(f"wedged: alive but no progress for {STUCK_SECONDS:.0f} s")
                self.kill()
                moved_at = time.monotonic()
            if supervised:
                self.supervise()
            assert self.managed is not None, "the worker was never started"
            assert self.managed.running(), self.managed.output()
            assert time.monotonic() - began < timeout, (
                f"worker behind (uncommitted records by partition): {lagging}\n"
                f"{self.text()[-6000:]}"
            )
            time.sleep(0.5)
        return time.monotonic() - began


# ---------------------------------------------------------------------------
# Reef processes and the API, as the fault tests use them

TOKEN = "reef-fault-token"


def reef_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "REEF_TOKEN": TOKEN,
        "REEF_UPSTREAM_API_KEY": f"sk-upstream-{uuid.uuid4().hex[:8]}",
        **(extra or {}),
    }


def serve_on_kafka(
    bootstrap: str,
    prefix: str,
    upstream: UpstreamProcess,
    state_dir: Path,
    *,
    name: str = "reef",
    port: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 90.0,
) -> ReefProcess:
    """``reef serve --log kafka`` on ``prefix`` in front of ``upstream`` (``env``: settings
    beyond the token and the upstream key)."""
    args = [*kafka_flags(bootstrap, prefix), "--upstream-url", upstream.v1_url]
    return start_reef(
        args, env=reef_env(env), state_dir=state_dir, port=port, timeout=timeout, name=name
    )


def create_scenarios(base_url: str, count: int, prefix: str = "fault") -> list[str]:
    """Create ``count`` scenarios through the API (no racing implicit creations)."""
    import httpx

    names = [f"{prefix}-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60.0) as client:
        for name in names:
            response = client.post("/reef/scenarios", json={"name": name})
            assert response.status_code == 201, response.text
    return names


def sigkill(managed: ManagedProcess) -> None:
    """SIGKILL a process we started (no shutdown at all) and reap it."""
    if managed.running():
        os.kill(managed.pid, signal.SIGKILL)
    managed.process.wait(30)
