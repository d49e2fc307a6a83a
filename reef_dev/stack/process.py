"""Detached service processes: pid files, logs, readiness waits, logged builds.

Services are launched through a throw-away ``/bin/sh`` that backgrounds the real
command and exits, so the service is re-parented to init: it is never a child
of the Python process that started it (no zombies, no ``Popen`` objects to
leak), it lives in its own session (Ctrl-C on ``scripts/stack up`` does not reach
it), and it survives the pytest run that started it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reef.core.errors import StackError

__all__ = ["StackError"]  # re-exported: the stack's modules raise Reef's one StackError

Echo = Callable[[str], None]


def no_echo(_: str) -> None:
    """An ``Echo`` that discards progress messages."""


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class Service:
    """A long-running process managed through a pid file.

    ``marker`` must occur in the process's command line; it guards against a
    stale pid file whose pid was reused by an unrelated process.
    """

    name: str
    argv: tuple[str, ...]
    workdir: Path
    log_file: Path
    pid_file: Path
    marker: str
    env: Mapping[str, str] = field(default_factory=dict)
    # Logs the service writes itself (e.g. Kafka's server.log), shown on failures too.
    extra_logs: tuple[Path, ...] = ()

    def pid(self) -> int | None:
        """The pid of the running service, or None.

        The pid file is trusted only while it names a live process with the marker.
        Otherwise ``/proc`` is searched for one: an instance whose pid file was lost
        or overwritten (a second launch that lost the race for the ports and exited)
        is adopted, its pid written back, so nobody starts a third copy and ``stop``
        still reaches it. Nothing found: the stale pid file is removed.
        """
        pid = _read_pid(self.pid_file)
        if pid is not None and pid_alive(pid, self.marker):
            return pid
        found = find_pid(self.marker)
        if found is not None:
            self.pid_file.write_text(f"{found}\n")
            return found
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()
        return None

    def is_running(self) -> bool:
        return self.pid() is not None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the output log and of every extra log, each with a header."""
        parts = []
        for path in (self.log_file, *self.extra_logs):
            text = tail(path, lines)
            if text:
                parts.append(f"--- last lines of {path}:\n{text}")
        return "\n".join(parts) or f"(no output in {self.log_file})"


def _read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


# How long a process may show no arguments before it is taken for another one: a
# process inside execve (the launcher's shell becoming ``env``, ``env`` becoming
# the service) has none for a moment, longer for a large binary on a slow machine.
EXEC_GRACE_S = 2.0


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """Whether ``pid`` is a live (non-zombie) process whose cmdline contains ``marker``.

    A process that shows no arguments is read again until it does or
    ``EXEC_GRACE_S`` has passed: right after ``spawn`` the service may be between
    two programs, and taking that moment for an exit would report a healthy
    service as dead.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc = Path("/proc") / str(pid)
    if not Path("/proc/self").exists():
        return True  # no procfs: trust kill(pid, 0)
    deadline = time.monotonic() + EXEC_GRACE_S
    try:
        while True:
            stat = (proc / "stat").read_text()
            # The state follows the parenthesised command name.
            if stat[stat.rindex(")") + 2 :].startswith(("Z", "X")):
                return False
            if marker is None:
                return True
            cmdline = (proc / "cmdline").read_bytes()
            if cmdline.strip(b"\0"):
                return marker.encode() in cmdline.replace(b"\0", b" ")
            if time.monotonic() >= deadline:
                return False  # no arguments for that long: a kernel thread, not ours
            time.sleep(0.01)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return False


def find_pid(marker: str) -> int | None:
    """A live process with an argument that is ``marker`` or ends in ``=marker``."""
    proc = Path("/proc")
    if not (proc / "self").exists():
        return None
    wanted = marker.encode()
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        named = any(arg == wanted or arg.endswith(b"=" + wanted) for arg in args)
        if named and pid_alive(int(entry.name), marker):
            return int(entry.name)
    return None


def spawn(service: Service) -> int:
    """Start ``service`` detached unless it already runs; return its pid."""
    existing = service.pid()
    if existing is not None:
        return existing
    service.log_file.parent.mkdir(parents=True, exist_ok=True)
    service.pid_file.parent.mkdir(parents=True, exist_ok=True)
    service.workdir.mkdir(parents=True, exist_ok=True)
    argv = list(service.argv)
    if service.env:
        argv = ["env", *(f"{k}={v}" for k, v in service.env.items()), *argv]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with service.log_file.open("a") as log:
        log.write(f"\n=== {stamp} starting {service.name}: {shlex.join(service.argv)}\n")
    script = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
    launched = subprocess.run(
        ["/bin/sh", "-c", script, "reef-stack-launch", str(service.log_file), *argv],
        cwd=service.workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=False,
        timeout=30,
    )
    out = launched.stdout.strip()
    if launched.returncode != 0 or not out.isdigit():
        raise StackError(f"could not launch {service.name}: {launched.stderr.strip() or out}")
    pid = int(out)
    service.pid_file.write_text(f"{pid}\n")
    return pid


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the service's whole process group (it was launched in a session of its
    own), so helper processes it forked cannot keep its ports after it is gone."""
    try:
        os.killpg(os.getpgid(pid), sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid, marker):
            return True
        time.sleep(0.1)
    return not pid_alive(pid, marker)


def stop(service: Service, timeout: float = 30.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True if something was running."""
    return bool(stop_all([service], timeout=timeout))


def stop_all(services: Sequence[Service], timeout: float = 30.0) -> list[Service]:
    """SIGTERM every running service at once, SIGKILL those still up after ``timeout``.

    Repeats while an instance is still found (an orphan of an earlier launch, which
    ``Service.pid`` adopts), a few rounds at most. Returns the services that were running.
    """
    stopped: list[Service] = []
    for _ in range(3):
        running = [(svc, pid) for svc in services if (pid := svc.pid()) is not None]
        if not running:
            break
        for _, pid in running:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for svc, pid in running:
            if not _wait_gone(pid, svc.marker, max(0.0, deadline - time.monotonic())):
                _signal_group(pid, signal.SIGKILL)
                _wait_gone(pid, svc.marker, 10.0)
            _signal_group(pid, signal.SIGKILL)  # children that outlived it keep its sockets
            with contextlib.suppress(FileNotFoundError):
                svc.pid_file.unlink()
            if svc not in stopped:
                stopped.append(svc)
    return stopped


def kill(service: Service) -> bool:
    """SIGKILL the service at once (a crash, for fault tests); True if it was running."""
    killed = False
    for _ in range(3):
        pid = service.pid()
        if pid is None:
            break
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, service.marker, 10.0)
        with contextlib.suppress(FileNotFoundError):
            service.pid_file.unlink()
        killed = True
    return killed


def _exited(service: Service) -> bool:
    """Whether ``service`` is gone, seen so twice a second apart: one look can fall
    where its pid cannot be confirmed (between the launcher's programs, or while
    another launch rewrites the pid file)."""
    if service.is_running():
        return False
    time.sleep(1.0)
    return not service.is_running()


def wait_until(
    what: str,
    probe: Callable[[], bool],
    *,
    timeout: float,
    services: Sequence[Service] = (),
    interval: float = 0.5,
    echo: Echo = no_echo,
) -> float:
    """Call ``probe`` until it returns True; return the seconds it took.

    Fails early, with the tail of its log, when one of ``services`` exits, and
    on timeout with the last probe error and the logs' tails.
    """
    start = time.monotonic()
    deadline = start + timeout
    last_error = "not ready"
    next_note = start + 15.0
    while True:
        for svc in services:
            if _exited(svc):
                raise StackError(f"{svc.name} exited while waiting for {what}\n{svc.log_tail()}")
        try:
            if probe():
                return time.monotonic() - start
        except Exception as exc:  # the probe's failure is the information we report
            last_error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now >= deadline:
            logs = "\n".join(svc.log_tail() for svc in services)
            raise StackError(
                f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})"
                + (f"\n{logs}" if logs else "")
            )
        if now >= next_note:
            echo(f"  ... still waiting for {what} ({format_elapsed(now - start)}): {last_error}")
            next_note = now + 15.0
        time.sleep(interval)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_free_ports(
    service: Service, host: str, ports: Sequence[int], wait_s: float = 15.0
) -> None:
    """Fail clearly when a port ``service`` needs stays held by some other process.

    A server stopped a moment ago may still be closing its listeners (SeaweedFS takes
    several seconds), so busy ports are polled for ``wait_s`` before giving up.
    """
    deadline = time.monotonic() + wait_s
    busy = [port for port in ports if port_open(host, port, timeout=0.5)]
    while busy and time.monotonic() < deadline:
        time.sleep(0.5)
        busy = [port for port in ports if port_open(host, port, timeout=0.5)]
    if busy:
        raise StackError(
            f"cannot start {service.name}: {host} port(s) {', '.join(map(str, busy))} "
            "already in use by another process (a stack from another REEF_STACK_HOME?)"
        )


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so concurrent ``up`` calls do not race."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def run_logged(
    argv: Sequence[str],
    *,
    label: str,
    log_file: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    echo: Echo = no_echo,
    on_line: Callable[[str], str | None] | None = None,
    heartbeat: float = 20.0,
) -> str:
    """Run a foreground command, logging all of its output to ``log_file``.

    ``on_line`` sees each output line and may return a progress message to
    echo; a heartbeat with the elapsed time is echoed when nothing was said for
    ``heartbeat`` seconds. Returns the output; raises StackError with the log's
    tail on a non-zero exit.
    """
    full = list(argv)
    if env:
        full = ["env", *(f"{k}={v}" for k, v in env.items()), *full]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    lines: queue.Queue[str | None] = queue.Queue()
    collected: list[str] = []
    start = time.monotonic()
    with log_file.open("a") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n")
        log.flush()
        with subprocess.Popen(
            full,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as proc:
            assert proc.stdout is not None
            stream = proc.stdout

            def pump() -> None:
                for raw in stream:
                    lines.put(raw.rstrip("\n"))
                lines.put(None)

            reader = threading.Thread(target=pump, name=f"{label}-output", daemon=True)
            reader.start()
            last_said = time.monotonic()
            while True:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    line = ""
                else:
                    if line is None:
                        break
                    log.write(line + "\n")
                    collected.append(line)
                    note = on_line(line) if on_line is not None else None
                    if note:
                        echo(f"  [{label}] {note}")
                        last_said = time.monotonic()
                now = time.monotonic()
                if now - last_said >= heartbeat:
                    echo(f"  [{label}] still running ({format_elapsed(now - start)} elapsed)")
                    last_said = now
            reader.join()
            code = proc.wait()
    if code != 0:
        raise StackError(
            f"{label} failed (exit {code}) after {format_elapsed(time.monotonic() - start)}; "
            f"last lines of {log_file}:\n{tail(log_file)}"
        )
    return "\n".join(collected)
