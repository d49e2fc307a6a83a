"""``reef engine --backend sglang`` as a process: the missing-SGLang exit, and the launch,
readiness wait and signal path against a TEST STAND-IN for SGLang.

SGLang needs CUDA and cannot run here. ``tests/support/sglang_standin`` is put on
``PYTHONPATH`` only in these tests: its ``sglang.launch_server`` serves Reef's own engine
(which speaks SGLang's HTTP protocol) on the port it is given. These tests prove Reef's
launcher (the command, readiness, the announced URL, SIGTERM forwarding, the child's status
as the command's) and that Reef's engine client drives what answers there; they prove
nothing about SGLang itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from reef.engine.engine_client import EngineClient
from reef.testing.servers import HOST, ManagedProcess, clean_env, free_port, spawn
from tests.support.engine import greedy

STANDIN = Path(__file__).resolve().parents[1] / "support" / "sglang_standin"


def _launch(tmp_path: Path, port: int) -> ManagedProcess:
    argv = [sys.executable, "-m", "reef.cli.engine", "--backend", "sglang"]
    argv += ["--model", "tiny", "--host", HOST, "--port", str(port), "--ready-timeout", "90"]
    env = clean_env({"PYTHONPATH": os.pathsep.join([str(STANDIN), os.getcwd()])})
    return spawn(argv, env=env, log_dir=tmp_path, name="sglang-backend")


def _announced(managed: ManagedProcess, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in managed.stdout_text().splitlines():
            if "reef sidecar --engine " in line:
                return line
        assert managed.running(), managed.output()
        time.sleep(0.2)
    raise AssertionError(f"no URL announced\n{managed.output()}")


def _child_pid(line: str) -> int:
    return int(line.split("(pid ", 1)[1].split(")", 1)[0])


def test_without_sglang_the_command_exits_2_with_one_line_naming_python_and_the_gpu() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "reef.cli.engine", "--backend", "sglang", "--model", "m"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert sys.executable in lines[0]
    assert "GPU" in lines[0]
    assert "sglang" in lines[0]


def test_it_announces_the_url_once_ready_serves_there_and_sigterm_stops_the_child(
    tmp_path: Path,
) -> None:
    port = free_port()
    managed = _launch(tmp_path, port)
    try:
        line = _announced(managed)
        url = f"http://{HOST}:{port}"
        assert line.endswith(f"reef sidecar --engine {url}")
        with EngineClient(url, timeout_s=30) as client:
            assert client.model_info().model_path == "tiny"
        with httpx.Client(timeout=30) as http:
            assert greedy(http, url, max_new_tokens=2)["meta_info"]["completion_tokens"] == 2
        child = _child_pid(line)
        managed.process.send_signal(signal.SIGTERM)
        # the stand-in's uvicorn shuts down gracefully, then re-raises the SIGTERM it caught
        assert managed.process.wait(30) == 128 + signal.SIGTERM, managed.output()
        assert not _alive(child)
    finally:
        managed.stop()


def test_the_childs_death_ends_the_command_with_its_status(tmp_path: Path) -> None:
    managed = _launch(tmp_path, free_port())
    try:
        os.kill(_child_pid(_announced(managed)), signal.SIGKILL)
        assert managed.process.wait(30) == 128 + signal.SIGKILL, managed.output()
    finally:
        managed.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
