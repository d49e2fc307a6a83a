"""Run Reef and the scripted upstream as real processes on loopback, for tests and benchmarks.

Every process writes its stdout/stderr to files (never pipes, which could fill and block
it); a start-up failure or timeout raises :class:`ProcessStartError` carrying the tail
of those files. Processes are stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reef.artifacts import ClaimCheck, open_store
from reef.core.errors import StackError
from reef.settings import load_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


class ProcessStartError(StackError):
    """A process exited or did not become ready in time; the message has its output."""


def free_port(host: str = HOST) -> int:
    """A port nobody listens on right now (the usual bind-to-0 trick; racy but fine on loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def reef_executable() -> str:
    """The ``reef`` console script of the interpreter running the tests (the venv's)."""
    beside = Path(sys.executable).with_name("reef")
    if beside.exists():
        return str(beside)
    found = shutil.which("reef")
    if found is None:
        raise FileNotFoundError("no 'reef' executable beside the interpreter or on PATH")
    return found


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any ``REEF_*`` setting, plus ``extra``.

    The terminal size a test runner exports (``COLUMNS``, ``LINES``: pytest-xdist's
    workers set 80x24) is left out too: a child's tables render as they would for a
    user, whoever runs the tests."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("REEF_") and k not in ("COLUMNS", "LINES")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def tail(path: Path, limit: int = 6000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no output>"
    return text[-limit:] or "<empty>"


@dataclass
class ManagedProcess:
    """A child process whose output goes to ``stdout_path`` / ``stderr_path``."""

    argv: list[str]
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\n"
            f"--- exit code: {self.process.poll()}\n"
            f"--- stdout:\n{tail(self.stdout_path)}\n--- stderr:\n{tail(self.stderr_path)}"
        )

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def stdout_text(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; returns the exit code."""
        return stop_process(self.process, timeout)


def stop_process(process: subprocess.Popen[Any], timeout: float = 10.0) -> int:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    return process.wait()


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_dir: Path,
    name: str,
    cwd: Path = REPO_ROOT,
) -> ManagedProcess:
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path = log_dir / f"{name}.stdout.log"
    stderr_path = log_dir / f"{name}.stderr.log"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=cwd,
        )
    return ManagedProcess(list(argv), process, stdout_path, stderr_path)


def run_reef(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run a short ``reef`` command to completion (captured text output)."""
    return subprocess.run(
        [reef_executable(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(env),
        cwd=REPO_ROOT,
        check=False,
    )


# ---------------------------------------------------------------------------
# Reef


@dataclass
class ReefProcess:
    """A running ``reef serve``."""

    base_url: str
    port: int
    managed: ManagedProcess
    state_dir: Path
    env: dict[str, str] = field(repr=False)

    def stop(self, timeout: float = 15.0) -> int:
        return self.managed.stop(timeout)

    def output(self) -> str:
        return self.managed.output()

    def claims(self) -> ClaimCheck:
        """The server's artifact store, which a reader on its log needs: bodies stored as
        blocks are assembled from it, claim-checked ones fetched."""
        settings = load_settings({"state_dir": self.state_dir}, environ=self.env).settings
        return ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)


def wait_healthy(managed: ManagedProcess, base_url: str, timeout: float) -> None:
    """Poll ``GET /healthz`` until it answers ``{"ok": true}``."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if not managed.running():
                raise ProcessStartError(f"reef serve exited during start-up\n{managed.output()}")
            try:
                response = client.get(f"{base_url}/healthz")
                if response.status_code == 200 and response.json().get("ok") is True:
                    return
                last = f"{response.status_code} {response.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last = repr(exc)
            time.sleep(0.1)
    managed.stop()
    raise ProcessStartError(
        f"reef serve not healthy within {timeout:.0f}s (last: {last})\n{managed.output()}"
    )


def start_reef(
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    state_dir: Path | None = None,
    log_dir: Path | None = None,
    port: int | None = None,
    timeout: float = 60.0,
    name: str = "reef",
) -> ReefProcess:
    """Start ``reef serve --host 127.0.0.1 --port P --state-dir D <args>`` and wait for health."""
    state_dir = state_dir or Path(tempfile.mkdtemp(prefix="reef-state-"))
    log_dir = log_dir or state_dir.parent / f"{state_dir.name}-logs"
    attempts = 1 if port is not None else 3
    for attempt in range(attempts):
        chosen = port or free_port()
        argv = [
            reef_executable(),
            "serve",
            "--host",
            HOST,
            "--port",
            str(chosen),
            "--state-dir",
            str(state_dir),
            *args,
        ]
        full_env = clean_env(env)
        managed = spawn(argv, env=full_env, log_dir=log_dir, name=f"{name}-{chosen}")
        base_url = f"http://{HOST}:{chosen}"
        try:
            wait_healthy(managed, base_url, timeout)
        except ProcessStartError:
            in_use = "address already in use" in managed.stderr_text().lower()
            if in_use and attempt + 1 < attempts:
                continue
            raise
        return ReefProcess(base_url, chosen, managed, state_dir, full_env)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_reef(args: Sequence[str] = (), **kwargs: Any) -> Iterator[ReefProcess]:
    server = start_reef(args, **kwargs)
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------
# The scripted upstream


class ScriptedUpstreamLog:
    """What a scripted upstream (reef/testing/scripted_upstream.py) at ``base_url`` says
    about the requests that reached it, wherever it runs."""

    __slots__ = ()
    base_url: str

    @property
    def v1_url(self) -> str:
        """What ``reef serve --upstream-url`` takes."""
        return f"{self.base_url}/v1"

    def requests(self, contains: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Recent requests that reached the upstream (headers as ``[name, value]`` pairs)."""
        params: dict[str, Any] = {"limit": limit}
        if contains is not None:
            params["contains"] = contains
        response = httpx.get(f"{self.base_url}/_stub/requests", params=params, timeout=10.0)
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()["requests"]
        return found

    def clear(self) -> None:
        httpx.delete(f"{self.base_url}/_stub/requests", timeout=10.0).raise_for_status()


@dataclass
class UpstreamProcess(ScriptedUpstreamLog):
    """The scripted upstream in its own process."""

    base_url: str
    managed: ManagedProcess

    def stop(self) -> int:
        return self.managed.stop()


def start_upstream(
    log_dir: Path | None = None,
    timeout: float = 30.0,
    module: str = "reef.testing.scripted_upstream",
) -> UpstreamProcess:
    """Start ``python -m <module> --port 0`` (the scripted upstream, or another stand-in
    printing the same ``ready <url>`` line) and read its ready line."""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="reef-upstream-"))
    argv = [sys.executable, "-m", module, "--port", "0"]
    managed = spawn(argv, env=clean_env(), log_dir=log_dir, name="upstream")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in managed.stdout_text().splitlines():
            if line.startswith("ready "):
                return UpstreamProcess(line.split()[1], managed)
        if not managed.running():
            break
        time.sleep(0.05)
    managed.stop()
    raise ProcessStartError(f"the scripted upstream did not get ready\n{managed.output()}")


@contextlib.contextmanager
def running_upstream(
    log_dir: Path | None = None, module: str = "reef.testing.scripted_upstream"
) -> Iterator[UpstreamProcess]:
    upstream = start_upstream(log_dir, module=module)
    try:
        yield upstream
    finally:
        upstream.stop()


def dead_url() -> str:
    """An upstream URL nothing listens on (connection refused)."""
    return f"http://{HOST}:{free_port()}/v1"
