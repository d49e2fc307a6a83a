"""Canary rollouts of learned candidates, end to end through the API with the tiny
engine, on both logs: a recipe with ``rollout: {share: 0.2, ...}`` (recipes/rollout.py)
and ``REEF_ROLLOUTS`` where the API and the processors run.

One test, in two phases on one deployment (the sft loop of tests/e2e/test_learning.py,
gate ``always`` so that the rollout, not the gate, is what judges the candidates):

1. a batch reported with its corrections trains a better candidate: the chain commits it
   held and starts its rollout; live sessions (two exchanges each, reported with their
   graded scores and no correction, so they never train) are routed 20% to it, and the
   controller promotes it; the promotion becomes the head and the engine serves it;
2. a batch reported with inverted corrections (the reversed words) trains a worse
   candidate, rolled out the same way and rolled back by the controller: the head stays,
   the candidate stays held and marked.

In both phases no session changes arm between its two exchanges, the share of sessions
the candidate served stays within four standard errors of 0.2, and ``reef audit trail``
of a receipt of each arm names that arm.
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from recipes.tasks import exact
from reef.testing.servers import run_reef
from tests.support.api import unique_scenario
from tests.support.learning import kafka_flags, learning_deployment
from tests.support.learning_loop import (
    MEASURE,
    TOKEN,
    TRAIN,
    TRAIN_BATCH,
    Loop,
    engine_env,
    write_recipe,
)

pytestmark = pytest.mark.slow

ROLLOUTS = {"REEF_ROLLOUTS": "true"}
SHARE = 0.2
#: the most live sessions a rollout may take to decide before the test fails
MAX_SESSIONS = 400
SESSIONS_PER_CHECK = 24


@pytest.fixture
def loop(request: pytest.FixtureRequest, log_kind: str, tmp_path: Path) -> Iterator[Loop]:
    scenario = unique_scenario("canary-learn")
    config = write_recipe(
        tmp_path,
        f"  batching: {{batch_size: {TRAIN_BATCH}}}\n"
        # only corrections train: the live reports (graded scores) never do
        "  training: {steps: 120, learning_rate: 0.003, imitate_min_score: 2.0}\n"
        f"  rollout: {{share: {SHARE}, min_exchanges: 20, max_duration_s: 3600}}\n",
        gate="{policy: always}",
    )
    bootstrap = request.getfixturevalue("kafka_bootstrap") if log_kind == "kafka" else None
    with learning_deployment(
        log_kind,
        tmp_path,
        {**engine_env(scenario, "sft", config), **ROLLOUTS},
        token=TOKEN,
        group="trainer:sft",
        kafka_bootstrap=bootstrap,
        streams_env=ROLLOUTS,
    ) as deployment:
        yield Loop(deployment, scenario)


def test_a_better_candidate_is_promoted_and_a_worse_one_rolled_back_on_live_reports(
    loop: Loop,
) -> None:
    rng = random.Random(7)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the creation release serves)
    first_head = loop.wait_engine_on_head()

    words = rng.sample(TRAIN, TRAIN_BATCH)
    loop.report(loop.ask_all(words), words)
    better = wait_rollout(loop, lambda r: True)
    assert (better["head_release_id"], better["share"]) == (first_head, SHARE), better
    decided, arms = live_until_decided(loop, better, rng)
    assert decided["status"] == "promoted", decided
    assert_share(arms, better["candidate_release_id"])
    assert_audit_names_the_arms(loop, arms, better)
    head = wait_head(loop, lambda h: h != first_head)
    assert loop.wait_engine_on_head() == head

    words = rng.sample(TRAIN, TRAIN_BATCH)
    loop.report(loop.ask_all(words), words, inverted=True)
    worse = wait_rollout(loop, lambda r: r["rollout_id"] != better["rollout_id"])
    assert worse["head_release_id"] == head, worse
    decided, arms = live_until_decided(loop, worse, rng)
    assert decided["status"] == "rolled_back", decided
    assert_share(arms, worse["candidate_release_id"])
    assert loop.serving() == (head, head)
    figures = decided["figures"]
    print(f"promoted: {better['rollout_id']}; rolled back: {figures}", flush=True)
    assert figures["candidate"]["mean_score"] < figures["head"]["mean_score"], figures


# ---------------------------------------------------------------------------
# Helpers


def rollouts(loop: Loop) -> list[dict[str, Any]]:
    with loop.client() as client:
        response = client.get(f"/reef/scenarios/{loop.scenario}/rollouts")
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["rollouts"]
    return found


def wait_rollout(loop: Loop, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The scenario's latest rollout once it is one ``wanted`` accepts (the trainer's
    candidate is committed with it)."""
    deadline = time.monotonic() + 180
    while True:
        found = sorted(rollouts(loop), key=lambda r: str(r["started_at"]))
        if found and wanted(found[-1]):
            assert found[-1]["status"] == "active", found[-1]
            return found[-1]
        assert time.monotonic() < deadline, f"no new rollout: {found}"
        time.sleep(0.25)


def wait_head(loop: Loop, wanted: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + 60
    while not wanted(head := loop.serving()[0]):
        assert time.monotonic() < deadline, f"head not as wanted: {head}"
        time.sleep(0.25)
    return head


Served = tuple[str, str]  # (release, receipt) of one exchange


def live_until_decided(
    loop: Loop, rollout: dict[str, Any], rng: random.Random
) -> tuple[dict[str, Any], dict[str, Served]]:
    """Live sessions, each two exchanges reported with their graded score, 24 at a time
    until the rollout ends: (the rollout as listed then, the release that served each
    session of the batches that ran while it was live, with a receipt). Such a session
    never changes arm; one of the last batch may (the decision moves every session at
    once)."""
    arms: dict[str, Served] = {}
    with loop.client() as client, ThreadPoolExecutor(4) as pool:
        while len(arms) < MAX_SESSIONS:
            batch = [
                (f"live-{uuid.uuid4().hex[:12]}", rng.sample(TRAIN, 2))
                for _ in range(SESSIONS_PER_CHECK)
            ]
            served = list(pool.map(lambda s: session(loop, client, *s), batch))
            (latest,) = [r for r in rollouts(loop) if r["rollout_id"] == rollout["rollout_id"]]
            if latest["status"] != "active":
                return latest, arms
            for (tag, _), exchanges in zip(batch, served, strict=True):
                releases = {release for release, _ in exchanges}
                assert len(releases) == 1, f"session {tag} changed arm: {releases}"
                arms[tag] = exchanges[0]
    raise AssertionError(f"undecided after {len(arms)} sessions: {latest}")


def session(loop: Loop, client: httpx.Client, tag: str, words: list[str]) -> list[Served]:
    """Two exchanges of one session, each reported with its graded score: the release
    that served each (the receipt's header) and its receipt."""
    served: list[Served] = []
    for word in words:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": loop.task.prompt(word)}],
            "temperature": 0,
            "max_tokens": 10,
        }
        response = client.post(
            "/v1/chat/completions", json=body, headers={"x-reef-tag-session": tag}
        )
        assert response.status_code == 200, response.text
        receipt = response.headers["x-reef-agent-record-id"]
        served.append((response.headers["x-reef-release-id"], receipt))
        answer = response.json()["choices"][0]["message"]["content"] or ""
        report = {"score": exact(answer, word), "references": [receipt]}
        reported = client.post("/reef/report", json=report)
        assert reported.status_code in (200, 201, 202), reported.text
    return served


def assert_audit_names_the_arms(
    loop: Loop, arms: dict[str, Served], rollout: dict[str, Any]
) -> None:
    """``reef audit trail`` of one receipt per arm names the rollout and the arm."""
    deployment = loop.deployment
    flags = (
        ["--state-dir", str(deployment.reef.state_dir)]
        if deployment.kafka_bootstrap is None
        else kafka_flags(deployment.kafka_bootstrap, deployment.topic_prefix)
    )
    candidate = rollout["candidate_release_id"]
    for arm, release in (("candidate", candidate), ("head", rollout["head_release_id"])):
        receipt = next(r for served, r in arms.values() if served == release)
        shown = run_reef("audit", "trail", receipt, *flags, timeout=120)
        assert shown.returncode == 0, shown.stderr
        trail = json.loads(shown.stdout)["rollout"]
        assert (trail["rollout_id"], trail["arm"]) == (rollout["rollout_id"], arm), trail


def assert_share(arms: dict[str, Served], candidate: str) -> None:
    sessions = len(arms)
    taken = sum(1 for release, _ in arms.values() if release == candidate) / sessions
    error = math.sqrt(SHARE * (1 - SHARE) / sessions)
    print(f"candidate {candidate[:8]} served {taken:.3f} of {sessions} sessions", flush=True)
    assert abs(taken - SHARE) <= 4 * error, (taken, sessions)
