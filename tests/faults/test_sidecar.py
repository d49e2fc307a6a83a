"""SIGKILL of an engine sidecar under load (helpers of tests/engine/test_sidecar.py).

``reef engine --model tiny`` serves behind ``reef serve`` (embedded log, the engine as
its upstream); a separate ``reef sidecar`` hot-loads the scenario's releases into it.
With the load running through Reef, the sidecar is SIGKILLed after release r1 is loaded;
r2 is committed while it is dead. The engine keeps serving the weights it has (r1, and
the receipts say so while the head is already r2); a restarted sidecar catches up to the
head (EngineLoaded r2) and the engine serves r2.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from reef.core import topics
from reef.core.events import InferenceRecorded
from reef.log.embedded import EmbeddedLog
from reef.testing.servers import (
    ManagedProcess,
    clean_env,
    free_port,
    reef_executable,
    spawn,
    start_reef,
)
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.faults import FaultRow, FaultTable, reef_env, sigkill
from tests.support.sidecar import (
    TOKEN as SIDECAR_TOKEN,
)
from tests.support.sidecar import (
    create_scenario,
    events,
    release,
    start_engine_on,
    wait_engine_on,
)

pytestmark = pytest.mark.slow

RATE = 4.0
GAP_SECONDS = 4.0


def test_sigkill_of_a_sidecar(fault_table: FaultTable, tmp_path: Path) -> None:
    from reef.modelkit import tiny

    folders = {
        name: tiny.save_tiny(tmp_path / f"w-{name}", seed=seed)
        for name, seed in (("a", 1), ("b", 2))
    }
    logs = tmp_path / "logs"
    port = free_port()
    engine_id = f"engine-{port}"
    engine = start_engine_on(port, logs, "engine")
    state = tmp_path / "state"
    reef = start_reef(
        ["--upstream-url", f"{engine.url}/v1"],
        env=reef_env({"REEF_TOKEN": SIDECAR_TOKEN}),
        state_dir=state,
        name="reef-engine",
    )
    scenario = f"sidecar-{uuid.uuid4().hex[:10]}"
    sidecars: list[ManagedProcess] = []

    def start_sidecar() -> ManagedProcess:
        argv = [reef_executable(), "sidecar", "--engine", engine.url, "--scenario", scenario]
        argv += ["--engine-id", engine_id, "--state-dir", str(state)]
        managed = spawn(argv, env=clean_env(), log_dir=logs, name=f"sidecar-{len(sidecars)}")
        sidecars.append(managed)
        return managed

    try:
        base = create_scenario(reef, scenario)
        start_sidecar()
        wait_engine_on(reef, scenario, engine_id, base)
        r1 = release(state, scenario, base, folders["a"])
        wait_engine_on(reef, scenario, engine_id, r1)
        with SteadyLoad(
            [reef.base_url], SIDECAR_TOKEN, [scenario], rate=RATE, max_tokens=8, timeout=60.0
        ) as load:
            load.wait_acks(8)
            fault_at = time.monotonic()
            sigkill(sidecars[-1])
            r2 = release(state, scenario, r1, folders["b"])
            time.sleep(GAP_SECONDS)
            # the engine keeps serving what it loaded; the load goes on
            assert engine.info()["weight_version"] == r1
            load.wait_acks(4, since=fault_at)
            restart_at = time.monotonic()
            start_sidecar()
            wait_engine_on(reef, scenario, engine_id, r2)
            caught_up_at = time.monotonic()
            load.wait_acks(4, since=caught_up_at, timeout=60)
            end = time.monotonic()
        result = load.result
        assert engine.info()["weight_version"] == r2
        report = consistency.check(lambda: EmbeddedLog(state / "log.sqlite3"), result, [scenario])
        records = [
            e for e in events(state, topics.INFERENCE, scenario) if isinstance(e, InferenceRecorded)
        ]
        # while the sidecar was dead the head was r2 but the engine truthfully served r1
        gap = [r for r in records if r.release_id == r2 and r.served_release_id == r1]
        served = {r.served_release_id for r in records if r.event_id in result.receipts}
        fault_table.record(
            FaultRow(
                "SIGKILL of an engine sidecar (a release committed while it is dead)",
                result.offered_rate(fault_at, end),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                caught_up_at - fault_at,
                f"engine kept serving r1 ({len(gap)} receipts: head r2, served r1); restarted "
                f"sidecar loaded the head in {caught_up_at - restart_at:.1f} s; "
                f"errors {dict(result.errors)}",
            )
        )
        report.assert_ok()
        assert not result.errors, result.summary()
        assert gap, "no request was served on r1 while r2 waited for the dead sidecar"
        assert served <= {r1, r2}, served
        assert sidecars[-1].running(), sidecars[-1].output()
    finally:
        for sidecar in sidecars:
            sidecar.stop()
        reef.stop()
        engine.managed.stop()
