"""Detached services: neither a lost or overwritten pid file nor the moment a service
spends between two programs hides a running instance."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from reef_dev.stack import process


def _service(tmp_path: Path) -> process.Service:
    data = tmp_path / "data"
    return process.Service(
        name="sleeper",
        argv=(sys.executable, "-c", "import time; time.sleep(60)", f"--dir={data}"),
        workdir=tmp_path,
        log_file=tmp_path / "sleeper.log",
        pid_file=tmp_path / "sleeper.pid",
        marker=str(data),
    )


def _wait_exec(pid: int, marker: str) -> None:
    """Wait until ``pid`` runs the service's command (after fork, before exec, it does not)."""
    deadline = time.monotonic() + 10.0
    while not process.pid_alive(pid, marker):
        assert time.monotonic() < deadline, f"pid {pid} never ran the service command"
        time.sleep(0.01)


def test_an_instance_whose_pid_file_names_a_dead_launch_is_adopted(tmp_path: Path) -> None:
    service = _service(tmp_path)
    pid = process.spawn(service)
    try:
        _wait_exec(pid, service.marker)
        # a second launch that lost the race for the ports exited, but wrote its pid last
        service.pid_file.write_text("999999999\n")
        assert service.pid() == pid
        assert service.pid_file.read_text().strip() == str(pid)
    finally:
        process.kill(service)
    assert not process.pid_alive(pid)
    assert service.pid() is None
    assert not service.pid_file.exists()


def test_stop_reaches_every_instance_of_a_double_launch(tmp_path: Path) -> None:
    service = _service(tmp_path)
    assert process.spawn(service) == process.spawn(service)  # the second launch adopts
    # two launches that checked before either had started: one instance has no pid file
    orphan = subprocess.Popen(service.argv, start_new_session=True)
    try:
        _wait_exec(orphan.pid, service.marker)
        first = service.pid()
        assert first is not None and first != orphan.pid
        assert process.stop(service, timeout=5.0)
        assert not process.pid_alive(first)
        orphan.wait(timeout=10)
        assert not service.is_running()
    finally:
        orphan.kill()
        orphan.wait()


def test_a_process_that_only_mentions_the_marker_is_not_adopted(tmp_path: Path) -> None:
    service = _service(tmp_path)
    assert process.find_pid(str(tmp_path)) is None  # a prefix of the marker matches nothing
    assert service.pid() is None


# A process that blanks its own argument area for a while, as a process inside
# execve shows none, then restores it; it writes ``blank`` once nothing shows.
_BLANKS_ITS_ARGUMENTS = """
import ctypes, pathlib, sys, time
stat = pathlib.Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
start, end = int(stat[45]), int(stat[46])  # fields 48 and 49: arg_start, arg_end
saved = ctypes.string_at(start, end - start)
ctypes.memset(start, 0, end - start)
pathlib.Path(sys.argv[1]).write_text("blank")
time.sleep(0.5)
ctypes.memmove(start, saved, len(saved))
time.sleep(60)
"""


def test_a_service_between_two_programs_is_not_taken_for_dead(tmp_path: Path) -> None:
    data = tmp_path / "data"
    flag = tmp_path / "flag"
    service = process.Service(
        name="exec-window",
        argv=(sys.executable, "-c", _BLANKS_ITS_ARGUMENTS, str(flag), f"--dir={data}"),
        workdir=tmp_path,
        log_file=tmp_path / "exec-window.log",
        pid_file=tmp_path / "exec-window.pid",
        marker=str(data),
    )
    pid = process.spawn(service)
    try:
        deadline = time.monotonic() + 10.0
        while not flag.exists():
            assert time.monotonic() < deadline, service.log_tail()
            time.sleep(0.01)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().strip(b"\0") == b""
        assert service.is_running()
        assert service.pid() == pid
        waited = process.wait_until("the service", lambda: True, timeout=5.0, services=(service,))
        assert waited < 5.0
    finally:
        process.kill(service)
    assert not process.pid_alive(pid, service.marker)


def test_waiting_on_a_service_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = process.Service(
        name="quitter",
        argv=("/bin/sh", "-c", "echo 'no such table' >&2; exit 3", "quitter", f"--dir={data}"),
        workdir=tmp_path,
        log_file=tmp_path / "quitter.log",
        pid_file=tmp_path / "quitter.pid",
        marker=str(data),
    )
    process.spawn(service)
    with pytest.raises(process.StackError, match="quitter exited while waiting") as failed:
        process.wait_until("never", lambda: False, timeout=30.0, services=(service,))
    assert "no such table" in str(failed.value)
