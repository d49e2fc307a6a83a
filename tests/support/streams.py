"""``reef streams`` on Kafka as a process in its own working directory (its data dir is
there), waited on until it logs its Ready line; used by the release and learning tests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from reef.hosts import READY_LINE
from reef.testing.servers import ManagedProcess, clean_env, reef_executable

#: a killed member's partitions come back quickly
WORKER_ENV = {"REEF_STREAMS_SESSION_TIMEOUT_S": "6"}


@dataclass
class StreamsWorker:
    managed: ManagedProcess

    def wait_ready(self, timeout: float = 120.0) -> None:
        began = time.monotonic()
        while True:
            text = self.managed.stdout_text() + self.managed.stderr_text()
            if READY_LINE in text:
                return
            if not self.managed.running():
                pytest.fail(f"reef streams exited during start-up\n{self.managed.output()}")
            if time.monotonic() - began > timeout:
                pytest.fail(f"reef streams not ready in {timeout:.0f}s\n{self.managed.output()}")
            time.sleep(0.2)


def start_streams(
    bootstrap: str, prefix: str, work_dir: Path, env: Mapping[str, str] | None = None
) -> StreamsWorker:
    """``reef streams`` on Kafka under ``prefix``, in its own working directory."""
    flags = ["--log", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic-prefix", prefix]
    return start_streams_with(flags, work_dir, env)


def start_streams_with(
    log_flags: list[str], work_dir: Path, env: Mapping[str, str] | None = None
) -> StreamsWorker:
    """``reef streams <log flags>`` in its own working directory (its data dir is there);
    ``env`` adds settings (which processors it hosts)."""
    argv = [reef_executable(), "streams", *log_flags]
    return StreamsWorker(
        spawn_in(argv, work_dir, "streams", clean_env({**WORKER_ENV, **(env or {})}))
    )


def spawn_in(argv: list[str], work_dir: Path, name: str, env: Mapping[str, str]) -> ManagedProcess:
    """``argv`` started in ``work_dir`` (made if missing), its output in
    ``<name>.stdout.log`` and ``<name>.stderr.log`` there."""
    work_dir.mkdir(parents=True, exist_ok=True)
    out, err = work_dir / f"{name}.stdout.log", work_dir / f"{name}.stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, env=dict(env),
            cwd=work_dir,
        )  # fmt: skip
    return ManagedProcess(argv, process, out, err)
