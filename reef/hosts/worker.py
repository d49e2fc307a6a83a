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
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from pydantic import SecretStr

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
    log = EmbeddedLog(settings.state_dir / "log.sqlite3", partitions=settings.partitions)
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
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[ENV_PREFIX + name.upper()] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    return env


@contextlib.asynccontextmanager
async def processor_process(settings: Settings) -> AsyncIterator[None]:
    """``reef streams --log embedded`` as a child for the block (terminated after)."""
    argv = [sys.executable, "-m", "reef.cli", "streams"]
    process, log = await asyncio.to_thread(
        _spawn, argv, settings_environment(settings), settings.state_dir / "logs" / "streams.log"
    )
    try:
        yield
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _spawn(
    argv: list[str], env: dict[str, str], log_path: Path
) -> tuple[subprocess.Popen[bytes], BinaryIO]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log
