"""SIGKILL of a trainer under load (the trainer-crash machinery of
tests/e2e/test_trainer_crash.py, with the steady load running all along).

``reef serve`` (embedded log, its own trainer off) records exchanges and reports from the
load; ``reef trainer`` runs beside it on the same log with a torch-free recipe whose
"training" takes a while. The trainer is SIGKILLed twice - while a candidate trains and
right after a proposal was appended - and restarted each time. The API never notices;
training resumes; no sample is trained into two releases and the chain stays one line.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from reef.core import topics
from reef.core.events import ReleaseCommitted, SampleJoined
from reef.log.embedded import EmbeddedLog
from reef.testing.servers import ManagedProcess, UpstreamProcess, start_reef
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.faults import TOKEN, FaultRow, FaultTable, create_scenarios, reef_env
from tests.support.learning import RECIPE, start_trainer, wait_for_line

pytestmark = pytest.mark.slow

RATE = 8.0
BATCH = 4
#: (a line of the trainer's log, then a delay) at which it is killed
KILL_POINTS = (("training ", 0.2), ("proposed ", 0.0))


def untrained(state_dir: Path, scenarios: list[str]) -> tuple[dict[str, int], int]:
    """Samples not trained yet per scenario, and the training releases so far."""
    events, _ = consistency.read_events(
        lambda: EmbeddedLog(state_dir / "log.sqlite3"), scenarios, (topics.SAMPLES, topics.RELEASES)
    )
    joined = Counter(e.scenario for e in events if isinstance(e, SampleJoined))
    commits = [e for e in events if isinstance(e, ReleaseCommitted) and e.operation == "training"]
    consumed = Counter(e.scenario for e in commits for _ in e.sample_ids)
    return {s: joined[s] - consumed[s] for s in scenarios}, len(commits)


def test_sigkill_of_a_trainer(
    upstream: UpstreamProcess, fault_table: FaultTable, tmp_path: Path
) -> None:
    config = tmp_path / "recipe.yaml"
    config.write_text(
        f"recipe:\n  batching: {{batch_size: {BATCH}}}\n"
        "  eligibility: {max_staleness: 1000}\n  train_seconds: 1.0\n"
    )
    env = reef_env(
        {
            "REEF_RECIPE": RECIPE,
            "REEF_RECIPE_CONFIG": str(config),
            "REEF_TRAINER_IN_PROCESS": "false",
        }
    )
    state = tmp_path / "state"
    reef = start_reef(["--upstream-url", upstream.v1_url], env=env, state_dir=state, name="reef")
    logs = tmp_path / "logs"
    trainers: list[ManagedProcess] = []
    try:
        trainers.append(start_trainer([], state, env, logs, "trainer-0"))
        scenarios = create_scenarios(reef.base_url, 2, "trainer")
        with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE) as load:
            load.wait_acks(10)
            fault_at = 0.0
            for line, delay in KILL_POINTS:
                wait_for_line(trainers[-1], line, 0, timeout=60)
                time.sleep(delay)
                fault_at = fault_at or time.monotonic()
                trainers[-1].process.kill()  # SIGKILL
                trainers[-1].process.wait(30)
                trainers.append(start_trainer([], state, env, logs, f"trainer-{len(trainers)}"))
            restarted_at = time.monotonic()
            _, releases_then = untrained(state, scenarios)
            deadline = time.monotonic() + 60
            while untrained(state, scenarios)[1] <= releases_then:
                assert trainers[-1].running(), trainers[-1].output()
                assert time.monotonic() < deadline, "no release after the trainer restarted"
                time.sleep(0.3)
            trained_again_at = time.monotonic()
            end = time.monotonic()
        result = load.result
        # once the load stopped, the trainer consumes every full batch that is left
        deadline = time.monotonic() + 90
        while max((left := untrained(state, scenarios)[0]).values()) >= BATCH:
            assert trainers[-1].running(), trainers[-1].output()
            assert time.monotonic() < deadline, f"samples left untrained: {left}"
            time.sleep(0.5)
        report = consistency.check(lambda: EmbeddedLog(state / "log.sqlite3"), result, scenarios)
        _, releases = untrained(state, scenarios)
        fault_table.record(
            FaultRow(
                f"SIGKILL of a trainer ({len(KILL_POINTS)}x: mid-training, after proposing)",
                result.offered_rate(fault_at, end),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                trained_again_at - fault_at,
                f"recovery = first kill -> a release committed by a restarted trainer "
                f"(last restart -> release {trained_again_at - restarted_at:.1f} s); "
                f"{releases} training releases, {report.samples} samples; "
                f"client errors {dict(result.errors)}",
            )
        )
        report.assert_ok()
        assert not result.errors, result.summary()
        assert reef.managed.running(), reef.output()
    finally:
        for trainer in trainers:
            trainer.stop()
        reef.stop()
