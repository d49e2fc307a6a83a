"""``reef serve --workers N``: N API processes on one port, supervised.

Each worker is ``reef serve`` in a child process with the supervisor's settings (passed
as ``REEF_*`` variables, as the processors child gets them), bound to the port with
``SO_REUSEPORT``: the kernel spreads new connections over the workers by a hash of their
addresses, and a connection stays with the worker that accepted it. Worker 0 runs what a
deployment runs once (on the embedded log: the processors child, the trainer and the
judge); the others run the API alone (``serve_role: api``). Each worker writes events
under its own producer name (``<producer>-w<i>``).

The embedded log's single writer: SQLite serialises writers per transaction, so several
processes append to one file safely (every group commits under ``BEGIN IMMEDIATE``; a
writer that finds the lock taken waits in SQLite's busy handler), and each receipt is
still given only after its own group's COMMIT. What N processes lose is the sharing of
one fsync: each process commits its own groups. docs/performance.md has the figures.

Supervision: a worker that exits is started again after a pause (1 s, doubled up to 30 s
while it keeps dying within 10 s of its start). SIGTERM or SIGINT stops every worker
(each finishes its requests in flight: uvicorn's graceful shutdown) and the supervisor
exits 0. The supervisor holds the port bound (not listening) the whole time, so it fails
at start with one line if another program has the port, and port 0 picks one port for
all workers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType

import click

from reef.hosts.worker import settings_environment
from reef.settings import Settings

RESTART_PAUSE_S = 1.0
RESTART_PAUSE_MAX_S = 30.0
#: a worker that lived this long before it exited is restarted after the shortest pause
STABLE_AFTER_S = 10.0
STOP_GRACE_S = 15.0


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT, not yet listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def worker_settings(settings: Settings, index: int, port: int) -> Settings:
    """Worker ``index``'s settings: the supervisor's, one process each, its own role."""
    base = settings.deployment.producer_id or f"{socket.gethostname()}-{os.getpid()}"
    return settings.replace(
        workers=1,
        port=port,
        serve_reuse_port=True,
        serve_role="all" if index == 0 else "api",
        producer_id=f"{base}-w{index}",
    )


@dataclass
class _Worker:
    index: int
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    pause_s: float = RESTART_PAUSE_S
    restart_at: float = 0.0

    def start(self) -> None:
        argv = [sys.executable, "-m", "reef.cli", "serve"]
        self.process = subprocess.Popen(argv, env=self.env)
        self.started_at = time.monotonic()


@dataclass
class _Stop:
    requested: bool = False
    signals: list[int] = field(default_factory=list)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        self.signals.append(signum)


def supervise(settings: Settings) -> int:
    """Run ``settings.api.workers`` API processes until SIGTERM/SIGINT; the exit status."""
    if settings.upstream.url is None:
        click.echo(
            "reef serve: --workers needs an upstream (--upstream-url): the local engine "
            "serves one process",
            err=True,
        )
        return 2
    try:
        held = reuse_port_socket(settings.api.host, settings.api.port)
    except OSError as exc:
        click.echo(
            f"reef serve: cannot bind {settings.api.host}:{settings.api.port}: {exc}", err=True
        )
        return 2
    port = held.getsockname()[1]
    workers = [
        _Worker(i, settings_environment(worker_settings(settings, i, port)))
        for i in range(settings.api.workers)
    ]
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    click.echo(
        f"reef serve: {settings.api.workers} workers on the {settings.deployment.log} log, "
        f"listening on http://{settings.api.host}:{port}",
        err=True,
    )
    try:
        for worker in workers:
            worker.start()
        while not stop.requested:
            _restart_exited(workers)
            time.sleep(0.2)
    finally:
        _stop_all(workers)
        held.close()
    return 0


def _restart_exited(workers: list[_Worker]) -> None:
    now = time.monotonic()
    for worker in workers:
        process = worker.process
        if process is not None and process.poll() is None:
            continue
        if process is not None:  # it just exited: schedule its restart
            lived = now - worker.started_at
            worker.pause_s = (
                RESTART_PAUSE_S
                if lived >= STABLE_AFTER_S
                else min(worker.pause_s * 2, RESTART_PAUSE_MAX_S)
            )
            worker.restart_at = now + worker.pause_s
            worker.process = None
            click.echo(
                f"reef serve: worker {worker.index} exited with status {process.returncode} "
                f"after {lived:.1f} s; starting it again in {worker.pause_s:.0f} s",
                err=True,
            )
        elif now >= worker.restart_at:
            worker.start()


def _stop_all(workers: list[_Worker]) -> None:
    running = [w.process for w in workers if w.process is not None and w.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in running:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
