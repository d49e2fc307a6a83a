"""SIGKILL of ``reef streams`` hosting the rollout controller, mid-decision.

``reef serve --log kafka`` and ``reef streams`` with ``REEF_ROLLOUTS``. A held harness
release is rolled out at share 0.5; the worker is SIGKILLed, then the traffic that
decides the rollout runs while it is down (sessions reported 1.0 when the candidate
served them, 0.0 when the head did: a clear difference). The restarted worker works off
that backlog, so the decision is made while it does, and it is SIGKILLed there at a
random moment (twice), restarted each time. Once it has caught up, read_committed:

* exactly one ``RolloutDecided`` for the rollout (promoted), one promote proposal and
  one promote commit of the candidate, which is the head;
* ``reef replay --compare-live`` finds the controller's state (and every processor's)
  equal to the replay of the log.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from reef.artifacts import LocalArtifactStore
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import ReleaseCommitted, ReleaseProposed, RolloutDecided
from reef.core.rollout_control import promotion_id
from reef.testing.servers import UpstreamProcess, run_reef
from tests.support.api import chat_body
from tests.support.deployment import Deployment
from tests.support.faults import (
    TOKEN,
    FaultRow,
    FaultTable,
    StreamsWorker,
    kafka_flags,
    kafka_log_factory,
    serve_on_kafka,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROLLOUTS = {"REEF_ROLLOUTS": "true"}
SESSIONS = 120  # at share 0.5 about 60 per arm: min_exchanges (30) is reached in the backlog


def one_session(dep: Deployment, scenario: str, candidate: str) -> None:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "x-reef-scenario": scenario,
        "x-reef-tag-session": f"kill-{uuid.uuid4().hex[:12]}",
    }
    with httpx.Client(base_url=dep.base_url, headers=headers, timeout=60) as client:
        response = client.post("/v1/chat/completions", json=chat_body("hello"))
        assert response.status_code == 200, response.text
        release = response.headers["x-reef-release-id"]
        report = {
            "score": 1.0 if release == candidate else 0.0,
            "references": [response.headers["x-reef-agent-record-id"]],
        }
        reported = client.post("/reef/report", json=report)
        assert reported.status_code == 200, reported.text


def test_sigkill_of_the_controller_mid_decision_decides_once(
    kafka_bootstrap: str,
    kafka_prefix: Callable[[str], str],
    streams_worker: Callable[[str, str], StreamsWorker],
    upstream: UpstreamProcess,
    fault_table: FaultTable,
    tmp_path: Path,
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    prefix = kafka_prefix(kafka_bootstrap)
    worker = streams_worker(kafka_bootstrap, prefix)
    worker.env.update(ROLLOUTS)
    worker.start()
    state = tmp_path / "state"
    reef = serve_on_kafka(
        kafka_bootstrap, prefix, upstream, state, name="reef-rollouts", env=ROLLOUTS
    )
    try:
        dep = Deployment(
            "kafka",
            reef,
            TOKEN,
            TOKEN,
            ContentStore(LocalArtifactStore.in_state_dir(state)),
            kafka_log_factory(kafka_bootstrap, prefix),
            log_flags=kafka_flags(kafka_bootstrap, prefix),
            decide_timeout=90.0,
        )
        worker.wait_ready()
        scenario = dep.create_scenario("rollout-kill")
        content = dep.content.publish_files({"system_prompt.md": "the candidate"})
        candidate = dep.propose_training(scenario, content, pending=True)["release_id"]
        with dep.client() as client:
            started = client.post(
                f"/reef/scenarios/{scenario}/rollouts",
                json={"release_id": candidate, "share": 0.5, "min_exchanges": 30},
            )
        assert started.status_code == 201, started.text
        rollout_id = started.json()["rollout_id"]

        began = time.monotonic()
        worker.kill()  # the deciding traffic runs while the controller is down
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: one_session(dep, scenario, candidate), range(SESSIONS)))
        delays = []
        for _ in range(2):  # killed while it works off the backlog: mid-decision
            worker.start()
            worker.wait_ready()
            delays.append(rng.uniform(0.0, 2.0))
            time.sleep(delays[-1])
            worker.kill()
        worker.start()
        worker.wait_ready()
        caught_up_s = worker.wait_caught_up(timeout=120, supervised=True)
        head = dep.wait_release(scenario, dep.head(scenario)["release_id"])
        deadline = time.monotonic() + 60
        while head["operation"] != "promote":
            assert time.monotonic() < deadline, f"no promotion: {head}"
            time.sleep(0.5)
            head = dep.head(scenario)

        decided = [
            e
            for e in dep.events(topics.RELEASES)
            if isinstance(e, RolloutDecided) and e.rollout_id == rollout_id
        ]
        proposals = [
            e
            for e in dep.events(topics.RELEASE_PROPOSALS)
            if isinstance(e, ReleaseProposed)
            and e.proposal_id == promotion_id(scenario, rollout_id)
        ]
        promotions = [
            e
            for e in dep.events(topics.RELEASES)
            if isinstance(e, ReleaseCommitted)
            and e.operation == "promote"
            and e.target_release_id == candidate
        ]
        fault_table.record(
            FaultRow(
                "SIGKILL x2 of reef streams hosting the rollout controller",
                SESSIONS / (time.monotonic() - began),
                SESSIONS,
                0 if decided else 1,
                max(0, len(decided) - 1),
                caught_up_s,
                f"seed {seed}; kills {', '.join(f'{d:.2f}' for d in delays)} s after ready; "
                f"decisions {[(e.outcome, e.reason) for e in decided]}; "
                f"worker crashes: {worker.crashes or 'none'}",
            )
        )
        assert [(e.outcome, e.reason) for e in decided] == [("promoted", "statistic")], decided
        assert len(proposals) == 1, proposals
        assert len(promotions) == 1, promotions
        assert head["release_id"] == promotions[0].release_id

        replayed = run_reef("replay", "--compare-live", *dep.log_flags, env=ROLLOUTS, timeout=180)
        assert replayed.returncode == 0, f"{replayed.stdout}\n{replayed.stderr}"
        report = json.loads(replayed.stdout)
        assert report["equal"] is True and "rollouts" in report["live"], report
    finally:
        reef.stop()
