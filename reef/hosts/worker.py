"""The embedded processors in their own process, beside ``reef serve``.

On the embedded log the join and the release chain run in a child process of
``reef serve`` (``reef streams --log embedded``), so their work never shares the API's
interpreter lock: a request's added latency is the API's own. They still commit state,
outputs and positions in one SQLite transaction (see ``reef.hosts.embedded``), and
the child polls for appends made by the API process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, SecretStr

from reef.catalog import processors
from reef.hosts import READY_LINE
from reef.hosts.embedded import EmbeddedRuntime
from reef.log.embedded import EmbeddedLog
from reef.log.wire_format import open_codec
from reef.services.eventstore import EventStore
from reef.settings import ENV_PREFIX, Settings

logger = logging.getLogger(__name__)

#: how often the child looks for appends made by other processes
POLL_SECONDS = 0.02


async def run_embedded_processors(settings: Settings) -> None:
    """Host every processor on the embedded log until cancelled."""
    log = EmbeddedLog(
        settings.deployment.state_dir / "log.sqlite3", partitions=settings.deployment.partitions
    )
    await log.start()
    store = EventStore(log, open_codec(settings))  # decodes inputs, encodes outputs
    runtimes = [
        EmbeddedRuntime(log, processor, idle_wait=POLL_SECONDS, store=store)
        for processor in processors(settings)
    ]
    try:
        for runtime in runtimes:
            await runtime.start()
        logger.info("%s (embedded log %s)", READY_LINE, log.path)
        await asyncio.Event().wait()
    finally:
        for runtime in runtimes:
            await runtime.close()
        await log.close()


def settings_environment(settings: Settings) -> dict[str, str]:
    """The settings as ``REEF_*`` variables, so a child process reads exactly these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    for name, value in settings.flat().items():
        if value is None:
            continue
        env[ENV_PREFIX + name.upper()] = environment_value(value)
    return env


def environment_value(value: object) -> str:
    """``value`` written as :func:`reef.settings.read_env` reads it back."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):  # a comma-separated list
        return ",".join(str(item) for item in value)
    if isinstance(value, dict):  # JSON text (prices)
        return json.dumps(
            {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in value.items()}
        )
    return str(value)


#: the wait before starting the child again, doubled while it keeps exiting, up to the cap
RESTART_BACKOFF_S = (1.0, 30.0)
#: a child that ran this long counts as healthy: the next restart waits the shortest time
HEALTHY_RUN_S = 60.0


@contextlib.asynccontextmanager
async def processor_process(settings: Settings) -> AsyncIterator[None]:
    """``reef streams --log embedded`` as a supervised child for the block: when it exits
    (killed, out of memory, a bug), it is started again, after a wait that doubles while
    it keeps exiting; the processors resume from the positions they committed, so nothing
    is joined twice. Terminated after the block."""
    child = _Child(
        [sys.executable, "-m", "reef.cli", "streams"],
        settings_environment(settings),
        settings.deployment.state_dir / "logs" / "streams.log",
    )
    await child.start()
    supervisor = asyncio.create_task(child.supervise(), name="processors-supervisor")
    try:
        yield
    finally:
        supervisor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await supervisor
        await child.stop()


class _Child:
    """One child process, its output appended to a log file, started again by
    :meth:`supervise` whenever it exits."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self._argv, self._env, self._log_path = argv, env, log_path
        self._process: asyncio.subprocess.Process | None = None
        self._log: BinaryIO | None = None

    async def start(self) -> None:
        if self._log is None:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self._log_path.open("ab")
        self._process = await asyncio.create_subprocess_exec(
            *self._argv, env=self._env, stdout=self._log, stderr=subprocess.STDOUT
        )

    async def supervise(self) -> None:
        wait, cap = RESTART_BACKOFF_S
        while True:
            assert self._process is not None
            started = time.monotonic()
            code = await self._process.wait()
            if time.monotonic() - started >= HEALTHY_RUN_S:
                wait = RESTART_BACKOFF_S[0]
            logger.warning(
                "the embedded processors (pid %d) exited with %s; starting them again in "
                "%.0f s (their output: %s)",
                self._process.pid,
                code,
                wait,
                self._log_path,
            )
            await asyncio.sleep(wait)
            wait = min(2 * wait, cap)
            await self.start()

    async def stop(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            try:
                await asyncio.wait_for(self._process.wait(), 15)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        if self._log is not None:
            self._log.close()
