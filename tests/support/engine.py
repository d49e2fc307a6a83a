"""Engine processes on loopback (``python -m reef.cli.engine``, what ``reef engine`` runs),
the weight sets the engine tests swap between, and a greedy generation request.

``running_engine`` starts the engine as a real process and waits for ``GET /health``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reef.testing.servers import (
    HOST,
    ManagedProcess,
    ProcessStartError,
    clean_env,
    free_port,
    spawn,
)

#: a prompt whose greedy continuation differs between the weight sets below
PROMPT = "return exactly: hello"


@dataclass
class EngineProcess:
    url: str
    managed: ManagedProcess

    def stop(self) -> int:
        return self.managed.stop()


def start_engine(log_dir: Path, *args: str, timeout: float = 90.0) -> EngineProcess:
    port = free_port()
    argv = [sys.executable, "-m", "reef.cli.engine", "--host", HOST, "--port", str(port), *args]
    managed = spawn(argv, env=clean_env(), log_dir=log_dir, name=f"engine-{port}")
    url = f"http://{HOST}:{port}"
    wait_healthy(managed, url, timeout)
    return EngineProcess(url, managed)


def wait_healthy(managed: ManagedProcess, url: str, timeout: float) -> None:
    """Until the engine at ``url`` answers ``/health``; stops it and raises if it never does."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if not managed.running():
                raise ProcessStartError(f"the engine exited during start-up\n{managed.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health").status_code == 200:
                    return
            time.sleep(0.2)
    managed.stop()
    raise ProcessStartError(f"the engine did not get healthy\n{managed.output()}")


@contextlib.contextmanager
def running_engine(log_dir: Path, *args: str) -> Iterator[EngineProcess]:
    engine = start_engine(log_dir, *args)
    try:
        yield engine
    finally:
        engine.stop()


@dataclass(frozen=True)
class WeightSets:
    """Folders of the tiny model: A = the built-in seed, B = another seed, an adapter."""

    seed_a: Path
    seed_b: Path
    adapter: Path
    mismatched: Path


def greedy(
    client: httpx.Client, url: str, *, max_new_tokens: int = 16, **extra: object
) -> dict[str, Any]:
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        **extra,
    }
    response = client.post(f"{url}/generate", json=body)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer
