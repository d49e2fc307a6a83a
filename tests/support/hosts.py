"""A ``reef streams`` host as a real process, started, SIGKILLed and restarted by a test."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reef.hosts import READY_LINE
from reef.testing.servers import ManagedProcess, clean_env, reef_executable, spawn


@dataclass
class HostProcess:
    """``reef <log flags> streams`` with ``env``; each start is a fresh process."""

    log_flags: list[str]
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    process: ManagedProcess | None = None
    starts: int = 0
    ready_seconds: list[float] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        argv = [reef_executable(), "streams", *self.log_flags, "--loglevel", "info"]
        self.process = spawn(
            argv, env=clean_env(self.env), log_dir=self.log_dir, name=f"streams-{self.starts}"
        )

    async def wait_ready(self, timeout: float = 90.0) -> None:
        assert self.process is not None
        began = time.monotonic()
        while READY_LINE not in self.output_text():
            if not self.process.running():
                pytest.fail(f"reef streams exited during start-up\n{self.process.output()}")
            if time.monotonic() - began > timeout:
                pytest.fail(f"reef streams not ready in {timeout:.0f}s\n{self.process.output()}")
            await asyncio.sleep(0.1)
        self.ready_seconds.append(time.monotonic() - began)

    def output_text(self) -> str:
        assert self.process is not None
        return self.process.stdout_text() + self.process.stderr_text()

    def kill(self) -> None:
        """SIGKILL: no shutdown; whatever was in flight is left to the next start."""
        assert self.process is not None
        if self.process.running():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.process.wait(30)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=20)

    def assert_running(self) -> None:
        assert self.process is not None
        assert self.process.running(), f"reef streams died\n{self.process.output()}"
