"""The supervised ``reef streams`` workers of bench/streams_chaos.py.

:class:`Supervisor` starts workers, each with a distinct ``--instance-id``, and restarts
those that exit on their own (status 75: the host gave up on a transaction or its
watchdog ended it; any other status is a crash and counted apart); each end of a worker
process is an :class:`Exit`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.chaos_kafka import kafka_flags
from reef.hosts import READY_LINE
from reef.testing.servers import clean_env, reef_executable
from streams.host import EXIT_TRANSACTION_FAILED

Echo = Callable[[str], None]


# ---------------------------------------------------------------------------
# Supervised stream workers


@dataclass
class Exit:
    """One end of a worker process."""

    at: float
    slot: int
    pid: int
    status: int
    cause: str  # "75", "crash", "bench-kill", "wedge-kill", "removed"
    line: str  # its first CRITICAL line (else ERROR), for the report


@dataclass
class Worker:
    slot: int
    instance_id: str
    work_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    starts: int = 0
    #: the bench killed it and restarts it itself (the supervisor leaves it alone)
    held: bool = False
    #: why the bench ended it ("bench-kill", "wedge-kill", "removed"), until its exit is seen
    ending: str = ""
    retired: bool = False
    started_at: float = 0.0
    restart_at: float = 0.0  # when the supervisor restarts it (back-off)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def ready(self) -> bool:
        return self.alive() and READY_LINE in self.text()


def first_error_line(text: str) -> str:
    lines = text.splitlines()
    found = [ln for ln in lines if "[CRITICAL]" in ln] or [ln for ln in lines if "[ERROR]" in ln]
    if found:
        return found[0][:400]
    tb = [ln for ln in lines if ln and not ln.startswith((" ", "["))]
    return (tb[-1] if tb else "no error line")[:400]


class Supervisor:
    """Starts ``reef streams`` workers and restarts those that exit on their own."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        root: Path,
        env: Mapping[str, str],
        echo: Echo = print,
        restart_delay_s: float = 1.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.root = root
        self.env = dict(env)
        self.echo = echo
        self.restart_delay_s = restart_delay_s
        self.workers: list[Worker] = []
        self.exits: list[Exit] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="supervisor", daemon=True)
        self._slots = 0

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            for worker in self.workers:
                worker.retired = True
                self._terminate(worker, timeout=20.0)

    # -- the workers --------------------------------------------------------------------

    def live(self) -> list[Worker]:
        with self._lock:
            return [w for w in self.workers if not w.retired]

    def live_pids(self) -> dict[int, Worker]:
        with self._lock:
            return {w.pid: w for w in self.workers if w.pid is not None and w.alive()}

    def live_instances(self) -> dict[str, Worker]:
        """Instance id -> its worker, for the workers whose process is alive now."""
        with self._lock:
            return {w.instance_id: w for w in self.workers if w.alive()}

    def add(self) -> Worker:
        with self._lock:
            self._slots += 1
            slot = self._slots
            worker = Worker(slot, f"{self.prefix}worker-{slot}", self.root / f"worker-{slot}")
            self.workers.append(worker)
            self._spawn(worker)
            return worker

    def kill(self, worker: Worker, cause: str = "bench-kill", hold: bool = True) -> None:
        """SIGKILL; ``hold``: the bench restarts it (:meth:`restart`), else the supervisor."""
        with self._lock:
            worker.held = hold
            worker.ending = cause
            if worker.alive():
                assert worker.process is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGKILL)
                worker.process.wait(30)
            self._reap(worker)

    def restart(self, worker: Worker) -> None:
        with self._lock:
            worker.held = False
            if not worker.alive():
                self._reap(worker)
                self._spawn(worker)

    def remove(self, worker: Worker) -> int | None:
        """Stop a worker for good (SIGTERM: it leaves the group); its exit status."""
        with self._lock:
            worker.retired = True
            worker.ending = "removed"
        status = self._terminate(worker, timeout=30.0)  # not under the lock: it may take long
        with self._lock:
            self._reap(worker)
        return status

    def kill_pid(self, pid: int, cause: str) -> bool:
        """SIGKILL the worker running as ``pid`` (a wedge); the supervisor restarts it."""
        with self._lock:
            for worker in self.workers:
                if worker.pid == pid and worker.alive():
                    self.kill(worker, cause=cause, hold=False)
                    return True
        return False

    def all_ready(self) -> bool:
        return all(w.ready() for w in self.live())

    def worker_of(self, pid: int) -> Worker | None:
        with self._lock:
            for worker in self.workers:
                if worker.pid == pid:
                    return worker
        return None

    def exit_of(self, pid: int) -> Exit | None:
        with self._lock:
            for ended in self.exits:
                if ended.pid == pid:
                    return ended
        return None

    def forget(self, ended: Exit) -> None:
        """Count an exit apart (the wedge self-test's): "self-test" instead of its cause."""
        with self._lock:
            ended.cause = "self-test"

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(e.cause for e in self.exits)

    # -- internals -----------------------------------------------------------------------

    def _spawn(self, worker: Worker) -> None:
        worker.starts += 1
        worker.ending = ""
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        argv = [reef_executable(), "streams", *kafka_flags(self.bootstrap, self.prefix)]
        argv += ["--instance-id", worker.instance_id, "--loglevel", "info"]
        path = self.root / f"worker-{worker.slot}-start-{worker.starts}.log"
        with path.open("wb") as out:
            worker.process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=clean_env(self.env),
                cwd=worker.work_dir,
            )
        worker.log_path = path
        worker.started_at = time.monotonic()

    def _terminate(self, worker: Worker, timeout: float) -> int | None:
        if worker.process is None:
            return None
        if worker.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
            try:
                worker.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.echo(f"  worker {worker.slot} ignored SIGTERM for {timeout:.0f} s: SIGKILL")
                worker.process.kill()
                worker.process.wait(30)
        return worker.process.returncode

    def _reap(self, worker: Worker) -> None:
        """Record the exit of a worker's current process (once)."""
        process = worker.process
        if process is None or process.poll() is None:
            return
        if any(e.pid == process.pid for e in self.exits):
            return
        status = process.returncode
        if worker.ending:
            cause = worker.ending
        elif status == EXIT_TRANSACTION_FAILED:
            cause = "75"
        else:
            cause = "crash"
        line = first_error_line(worker.text())
        self.exits.append(Exit(time.monotonic(), worker.slot, process.pid, status, cause, line))
        if cause in ("75", "crash"):
            self.echo(
                f"  [supervisor] worker {worker.slot} (pid {process.pid}) exited {status} "
                f"({cause}): {line}"
            )

    def _main(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                now = time.monotonic()
                for worker in self.workers:
                    if worker.retired or worker.held or worker.alive():
                        continue
                    if worker.process is not None and not any(
                        e.pid == worker.process.pid for e in self.exits
                    ):
                        self._reap(worker)
                        worker.restart_at = now + self.restart_delay_s
                        continue
                    if now >= worker.restart_at:
                        self._spawn(worker)
