"""SIGKILL of ``reef serve``'s embedded processors under load.

On the embedded log, ``reef serve`` runs the join, the release chain and the other
processors in a child process (``reef streams --log embedded``). With the steady load
running (exchanges and reports), that child is SIGKILLed. The API keeps acknowledging;
``reef serve`` starts the child again; every acknowledged report gets exactly one fate
and no receipt is joined twice.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from reef.log.embedded import EmbeddedLog
from reef.testing.servers import UpstreamProcess, start_reef
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.faults import TOKEN, FaultRow, FaultTable, create_scenarios, reef_env

pytestmark = pytest.mark.slow

RATE = 8.0


def processors_child(parent: int) -> int | None:
    """The pid of ``parent``'s ``reef.cli streams`` child, if one runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # it ended meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]  # after the command's name
        if int(ppid) == parent and state != "Z" and b"streams" in argv and b"reef.cli" in argv:
            return int(entry.name)
    return None


def wait_for_child(parent: int, other_than: int | None, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while (child := processors_child(parent)) is None or child == other_than:
        assert time.monotonic() < deadline, "no processors child of reef serve"
        time.sleep(0.1)
    return child


def test_sigkill_of_the_embedded_processors(
    upstream: UpstreamProcess, fault_table: FaultTable, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    reef = start_reef(
        ["--upstream-url", upstream.v1_url], env=reef_env(), state_dir=state, name="reef"
    )
    try:
        first = wait_for_child(reef.managed.pid, None)
        scenarios = create_scenarios(reef.base_url, 2, "processors")
        with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE) as load:
            load.wait_acks(10)
            fault_at = time.monotonic()
            os.kill(first, signal.SIGKILL)
            second = wait_for_child(reef.managed.pid, first)
            restarted_at = time.monotonic()
            load.wait_acks(20, since=restarted_at)
            end = time.monotonic()
        result = load.result
        report = consistency.check(lambda: EmbeddedLog(state / "log.sqlite3"), result, scenarios)
        fault_table.record(
            FaultRow(
                "SIGKILL of reef serve's embedded processors (child process)",
                result.offered_rate(fault_at, end),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                restarted_at - fault_at,
                f"recovery = kill -> a new child running (pid {first} -> {second}); "
                f"{report.samples} samples; client errors {dict(result.errors)}",
            )
        )
        report.assert_ok()
        assert not result.errors, result.summary()
        assert reef.managed.running(), reef.output()
    finally:
        reef.stop()
