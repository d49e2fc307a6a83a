"""The local engine as a child process of ``reef serve`` when no upstream is configured.

``reef serve`` with no ``upstream_url`` starts ``reef engine --model <engine_model>`` on a
free loopback port, waits for ``/health`` and uses it as its OpenAI-dialect upstream, so
the default deployment serves requests with no key, no network and no GPU. The process
belongs to the app's lifespan: it is terminated (then killed) when Reef stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

import httpx

from reef.core.errors import ConfigError

READY_SECONDS = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def local_engine(
    model: str, log_dir: Path, tool_call_parser: str | None = None, device: str = "cpu"
) -> AsyncIterator[str]:
    """Run the engine for the block; yields its base URL (``.../v1`` for the upstream)."""
    port = free_port()
    argv = [sys.executable, "-m", "reef.cli", "engine", "--model", model, "--port", str(port)]
    argv += ["--device", device]
    if tool_call_parser is not None:
        argv += ["--tool-call-parser", tool_call_parser]
    process, log = await asyncio.to_thread(_spawn, argv, log_dir / "engine.log")
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_ready(process, url, log_dir / "engine.log")
        yield url
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _spawn(argv: list[str], log_path: Path) -> tuple[subprocess.Popen[bytes], BinaryIO]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log


def _last_line(log_path: Path) -> str:
    """The engine's last words (``reef engine`` says in one line why it stopped)."""
    try:
        lines = log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1].strip()}" if lines else ""


async def _wait_ready(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_SECONDS
        while loop.time() < deadline:
            if process.poll() is not None:
                raise ConfigError(
                    f"the local engine exited with {process.returncode}{_last_line(log_path)}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/health")).status_code == 200:
                    return
            await asyncio.sleep(0.25)
    raise ConfigError(f"the local engine did not answer /health within {READY_SECONDS:.0f}s")
