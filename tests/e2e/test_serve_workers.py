"""``reef serve --workers 2``: two API processes on one port, supervised, on both logs.

Connections are spread over both workers (each writes under its own producer name), every
receipt handed out is in the log, what runs once runs once (on the embedded log one
processors child, and a report posted to either worker is joined), a SIGKILLed worker
is started again while the other keeps serving, and SIGTERM stops them all.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.events import SampleJoined
from reef.core.topics import SAMPLES
from reef.testing.servers import run_reef
from tests.support.api import chat_body, unique_scenario
from tests.support.reef_server import ReefServer


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    return {"args": ["--workers", "2"]}


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    for child in children(pid):
        out += [child, *descendants(child)]
    return out


def workers_of(server: ReefServer) -> list[int]:
    return [c for c in children(server.process.managed.pid) if " serve" in command(c)]


def infer_many(server: ReefServer, scenario: str, count: int) -> list[str]:
    """``count`` chat requests, each on a new connection (the kernel picks the worker)."""

    def one(i: int) -> str:
        with server.client(scenario) as client:
            response = client.post("/v1/chat/completions", json=chat_body(f"hello {i}"))
        assert response.status_code == 200, response.text
        return str(response.headers["x-reef-agent-record-id"])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(count)))


def test_connections_are_spread_over_both_workers_and_every_receipt_is_recorded(
    reef_server: ReefServer,
) -> None:
    assert len(workers_of(reef_server)) == 2
    scenario = unique_scenario("workers")
    receipts: list[str] = []
    workers: set[str] = set()
    deadline = time.monotonic() + 30  # a worker takes connections once it listens
    while workers != {"w0", "w1"} and time.monotonic() < deadline:
        receipts += infer_many(reef_server, scenario, 16)
        recorded = {e.event_id: e.producer for e in reef_server.inference(scenario)}
        assert set(receipts) <= set(recorded)
        workers = {recorded[r].rsplit("-", 1)[1] for r in receipts}
    assert workers == {"w0", "w1"}, workers


def test_what_runs_once_runs_once(reef_server: ReefServer) -> None:
    streams = [
        p for p in descendants(reef_server.process.managed.pid) if "reef.cli streams" in command(p)
    ]
    assert len(streams) == (1 if reef_server.kind == "embedded" else 0), streams
    if reef_server.kind != "embedded":
        return  # on Kafka the processors are `reef streams`, started on their own
    scenario = unique_scenario("workers-join")
    receipts = infer_many(reef_server, scenario, 8)
    for receipt in receipts:  # posted on new connections: both workers take some
        with reef_server.client(scenario) as client:
            response = client.post("/reef/report", json={"score": 1.0, "references": [receipt]})
        assert response.status_code == 200, response.text
    joined = reef_server.wait_for(
        SAMPLES,
        scenario,
        lambda e: isinstance(e, SampleJoined),
        timeout=30,
    )
    deadline = time.monotonic() + 30
    while len(joined) < len(receipts) and time.monotonic() < deadline:
        time.sleep(0.2)
        joined = [e for e in reef_server.events(SAMPLES, scenario) if isinstance(e, SampleJoined)]
    assert len(joined) == len(receipts)


def test_a_worker_killed_under_load_is_started_again_and_loses_no_receipt(
    reef_server: ReefServer,
) -> None:
    """SIGKILL of a worker while both serve: every receipt handed out is in the log, the
    other worker keeps serving, and the supervisor starts the killed one again."""
    before = workers_of(reef_server)
    victim = before[1]
    scenario = unique_scenario("workers-kill")
    receipts: list[str] = []
    refused = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal refused
        while not stop.is_set():
            try:
                with reef_server.client(scenario, timeout=10) as client:
                    response = client.post("/v1/chat/completions", json=chat_body("load"))
            except httpx.HTTPError:
                refused += 1  # a connection the killed worker had accepted
                continue
            if response.status_code == 200:
                receipts.append(response.headers["x-reef-agent-record-id"])

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)
        given_at_kill = len(receipts)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = workers_of(reef_server)
            if len(now) == 2 and victim not in now and len(receipts) > given_at_kill + 20:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # the restarted worker takes connections too
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    after = workers_of(reef_server)
    assert len(after) == 2 and victim not in after and before[0] in after
    assert "starting it again" in reef_server.process.output()
    assert len(receipts) > given_at_kill + 20, (given_at_kill, len(receipts), refused)
    recorded = {e.event_id for e in reef_server.inference(scenario)}
    assert set(receipts) <= recorded, set(receipts) - recorded


def test_sigterm_stops_every_worker(reef_server: ReefServer) -> None:
    supervisor = reef_server.process.managed.pid
    processes = descendants(supervisor)
    reef_server.stopped = True
    assert reef_server.process.stop(timeout=30) == 0
    for pid in processes:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        ), command(pid)


def test_a_configuration_every_worker_would_refuse_stops_the_supervisor_at_once(
    tmp_path: Path,
) -> None:
    """No token: one line and exit 2 from the supervisor, no worker started and restarted."""
    result = run_reef(
        "serve",
        "--workers",
        "2",
        "--upstream-url",
        "http://127.0.0.1:9/v1",
        "--state-dir",
        str(tmp_path / "state"),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "no token configured" in result.stderr
    assert "worker" not in result.stderr


def test_workers_without_an_upstream_are_refused_with_one_line(tmp_path: Path) -> None:
    result = run_reef(
        "serve",
        "--workers",
        "2",
        "--state-dir",
        str(tmp_path / "state"),
        env={"REEF_TOKEN": "t"},
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "--workers needs an upstream" in result.stderr
