"""Detached services: a lost or overwritten pid file never hides a running instance."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

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
