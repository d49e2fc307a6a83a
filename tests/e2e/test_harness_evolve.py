"""harness_evolve end to end: failing reports → proposed edit → paired gate → harness served.

``reef serve`` proxies the scripted harness upstream (reef/testing/harness_upstream.py,
its own process): its agent answers ``Task: <word>`` correctly (the word reversed) only
when the system prompt carries the rule, and as the proposer it answers with one JSON
edit. Every scenario starts from the seed harness (``REEF_SEED_DIR``). Both logs
(tests/support/learning.py): on the embedded log the ``harness_evolve`` trainer runs
inside ``reef serve``; on Kafka it is a ``reef trainer`` process beside ``reef serve``
and a ``reef streams`` worker, on a topic prefix of their own.

An agent here does what a client of a harness scenario does: fetch ``GET /reef/harness``,
compose the system prompt from its files, ask through Reef's ``/v1/chat/completions``
(openai SDK), and a programmatic grader posts one report per answer (httpx).

* scenario ``fix``: the failures make the proposer append the rule; the candidate wins
  the paired evaluation, is committed, the harness served is the winner's, and the
  agent now passes held-out tasks.
* scenario ``useless``: the proposer appends a rule that does not help; the paired
  evaluation ties, the gate rejects, and the served harness is unchanged.
* scenario ``malformed``: the proposer answers prose; the candidate fails closed and the
  served harness is unchanged.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from recipes.harness_edits import compose
from recipes.harness_evolve import PROPOSER_MARKER
from recipes.tasks import exact
from reef.testing.harness_upstream import MALFORMED, RULE, USELESS
from reef.testing.servers import UpstreamProcess, running_upstream
from tests.support.api import unique_scenario
from tests.support.learning import LearningDeployment, learning_deployment
from tests.support.reef_server import LOG_KINDS

pytestmark = pytest.mark.slow

PATTERNS = ["system_prompt.md", "skills/*.md", "rules/*.md"]
SEED = "You are a careful assistant.\nAnswer each task with a single word and nothing else.\n"
GATE_WORDS = ["lantern", "pebble", "harbor", "violet", "cactus", "meadow"]
TRAIN_WORDS = ["otter", "maple", "quartz", "cobalt"]
HELD_OUT = ["falcon", "copper", "tundra", "walnut", "saffron"]
BATCH = len(TRAIN_WORDS)
STEP_TIMEOUT_S = 180.0


def recipe_yaml(tmp: Path) -> Path:
    tasks = tmp / "gate-tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"prompt": f"Task: {w}", "answer": w[::-1]}) + "\n" for w in GATE_WORDS)
    )
    config = tmp / "harness.yaml"
    config.write_text(
        f"""
recipe:
  batching: {{batch-size: {BATCH}}}
  upstream: {{model: stub-model, seed: 0}}
  proposer: {{failing-below: 1.0}}
  harness: {{files: {json.dumps(PATTERNS)}}}
  evaluation: {{tasks-file: {tasks.name}, grader: exact, max-new-tokens: 32}}
  gate: {{margin: 0.5}}
"""
    )
    return config


GROUP = "trainer:harness_evolve"
OUTCOMES = {"accepted": "committed", "rejected": "gate_rejected", "failed": "training_failed"}


@dataclass(frozen=True)
class Episode:
    word: str
    answer: str
    score: float
    receipt: str
    release: str


@dataclass(frozen=True)
class Step:
    """What the trainer did with one scenario's batch."""

    outcome: str  # committed | gate_rejected | training_failed
    log: str  # the trainer's log lines about the scenario


@dataclass
class Deployment:
    loop: LearningDeployment
    upstream: UpstreamProcess

    def http(self, scenario: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.loop.token}"}
        if scenario is not None:
            headers["x-reef-scenario"] = scenario
        return httpx.Client(base_url=self.loop.base_url, headers=headers, timeout=60.0)

    def create(self, prefix: str) -> str:
        scenario = unique_scenario(prefix)
        with self.http() as client:
            response = client.post("/reef/scenarios", json={"name": scenario})
        assert response.status_code == 201, response.text
        return scenario

    def harness(self, scenario: str, release_id: str | None = None) -> dict[str, Any]:
        params = {"release_id": release_id} if release_id else {}
        with self.http(scenario) as client:
            response = client.get("/reef/harness", params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert response.headers["x-reef-release-id"] == body["release_id"]
        return body

    def run_agent(self, scenario: str, words: list[str], suffix: str = "") -> list[Episode]:
        """Each task once, with the harness served now, through Reef (openai SDK)."""
        served = self.harness(scenario)
        system = compose(served["files"], PATTERNS)
        client = openai.OpenAI(
            base_url=f"{self.loop.base_url}/v1",
            api_key=self.loop.token,
            default_headers={"x-reef-scenario": scenario},
            timeout=60.0,
            max_retries=0,
        )
        episodes = []
        try:
            for word in words:
                raw = client.chat.completions.with_raw_response.create(
                    model="stub-model",
                    messages=[
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"Task: {word}{suffix}"},
                    ],
                    temperature=0,
                )
                answer = raw.parse().choices[0].message.content or ""
                episodes.append(
                    Episode(
                        word,
                        answer,
                        exact(answer, word[::-1]),
                        raw.headers["x-reef-agent-record-id"],
                        raw.headers["x-reef-release-id"],
                    )
                )
        finally:
            client.close()
        assert {e.release for e in episodes} == {served["release_id"]}
        return episodes

    def report(self, scenario: str, episodes: list[Episode]) -> None:
        """The programmatic grader's verdicts, one report per answer."""
        with self.http(scenario) as client:
            for episode in episodes:
                body = {
                    "score": episode.score,
                    "feedback": {"expected": episode.word[::-1]},
                    "references": [episode.receipt],
                }
                response = client.post("/reef/report", json=body)
                assert response.status_code in (200, 201, 202), response.text

    def counters(self) -> dict[str, int]:
        status = self.loop.wait_trainer_status()
        assert status["error"] is None, status
        return dict(status["candidates"])

    def step_of(self, scenario: str, before: dict[str, int]) -> Step:
        """Wait until the trainer decided one more candidate (the scenario's batch: the
        counters grow once the chain committed, or the gate or the proposal failed);
        fail fast if it skipped the scenario's samples."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            self.loop.alive()
            status = self.loop.wait_trainer_status()
            skipped = [r for r in status["recent_rejections"] if r["scenario"] == scenario]
            assert not skipped, f"the trainer skipped samples of {scenario}: {skipped}"
            grown = [k for k in OUTCOMES if status["candidates"][k] > before[k]]
            if grown:
                assert len(grown) == 1, (before, status["candidates"])
                log = "\n".join(
                    line for line in self.loop.trainer_log().splitlines() if scenario in line
                )
                return Step(OUTCOMES[grown[0]], log)
            time.sleep(0.25)
        raise AssertionError(f"no trainer decision for {scenario}\n{self.loop.trainer_output()}")


def mean(episodes: list[Episode]) -> float:
    return sum(e.score for e in episodes) / len(episodes)


@pytest.fixture(scope="module", params=LOG_KINDS)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    kind: str = request.param
    bootstrap = request.getfixturevalue("kafka_topics") if kind == "kafka" else None
    tmp = tmp_path_factory.mktemp(f"harness-evolve-{kind}")
    seed = tmp / "seed"
    seed.mkdir()
    (seed / "system_prompt.md").write_text(SEED)
    token = f"reef-tok-{secrets.token_hex(8)}"
    with running_upstream(tmp / "upstream", module="reef.testing.harness_upstream") as upstream:
        env = {
            "REEF_TOKEN": token,
            "REEF_UPSTREAM_URL": upstream.v1_url,
            "REEF_UPSTREAM_DIALECT": "openai",
            "REEF_UPSTREAM_API_KEY": f"sk-upstream-{secrets.token_hex(8)}",
            "REEF_RECIPE": "harness_evolve",
            "REEF_RECIPE_CONFIG": str(recipe_yaml(tmp)),
            "REEF_SEED_DIR": str(seed),
        }
        with learning_deployment(
            kind, tmp, env, token=token, group=GROUP, kafka_bootstrap=bootstrap
        ) as loop:
            yield Deployment(loop, upstream)


def test_an_edit_that_fixes_the_failures_is_committed_and_served(deployment: Deployment) -> None:
    scenario = deployment.create("fix")
    before = deployment.harness(scenario)
    assert before["files"] == {"system_prompt.md": SEED}
    assert before["parent_release_id"] is None

    failures = deployment.run_agent(scenario, TRAIN_WORDS)
    assert [e.answer for e in failures] == TRAIN_WORDS  # no rule: the word, not reversed
    assert mean(failures) < 0.2
    assert mean(deployment.run_agent(scenario, HELD_OUT)) < 0.2  # held out: no report
    counted = deployment.counters()
    deployment.report(scenario, failures)

    step = deployment.step_of(scenario, counted)
    assert step.outcome == "committed", step

    after = deployment.harness(scenario)
    assert after["release_id"] != before["release_id"]
    assert after["parent_release_id"] == before["release_id"]
    assert after["files"] == {"system_prompt.md": SEED + RULE + "\n"}
    evaluation = after["evaluation"]
    assert evaluation["decision"]["selected"] is True
    assert evaluation["decision"]["policy"] == "win_margin"
    assert evaluation["candidate"]["score"] == 1.0
    assert evaluation["candidate"]["metrics"]["tasks"] == len(GATE_WORDS)
    assert evaluation["candidate"]["metrics"]["passed"] == len(GATE_WORDS)
    assert evaluation["baseline"]["score"] < 0.2
    assert evaluation["baseline"]["metrics"]["passed"] == 0
    pinned = deployment.harness(scenario, before["release_id"])
    assert pinned["files"] == {"system_prompt.md": SEED}  # history kept

    # the proposer was the upstream model, asked at temperature 0 with the failures
    proposals = deployment.upstream.requests(contains=PROPOSER_MARKER)
    shown = [p for p in proposals if any(f"Task: {w}" in p["raw"] for w in TRAIN_WORDS)]
    assert len(shown) == 1 and shown[0]["body"]["temperature"] == 0
    assert shown[0]["path"] == "/v1/chat/completions"

    # the served agent is better on held-out tasks, under the new release
    improved = deployment.run_agent(scenario, HELD_OUT)
    assert mean(improved) == 1.0
    assert {e.release for e in improved} == {after["release_id"]}


@pytest.mark.parametrize(
    ("marker", "outcome"), [(USELESS, "gate_rejected"), (MALFORMED, "training_failed")]
)
def test_an_edit_that_does_not_help_leaves_the_harness_unchanged(
    deployment: Deployment, marker: str, outcome: str
) -> None:
    scenario = deployment.create("nohelp")
    before = deployment.harness(scenario)
    failures = deployment.run_agent(scenario, TRAIN_WORDS, suffix=f" {marker}")
    assert mean(failures) < 0.2
    counted = deployment.counters()
    deployment.report(scenario, failures)

    step = deployment.step_of(scenario, counted)
    assert step.outcome == outcome, step
    if outcome == "gate_rejected":
        # both harnesses ran the task set (a tie); the useless rule reached the
        # candidate's episodes
        assert f"candidate for {scenario} rejected (gate_rejected)" in step.log, step
        assert re.search(r"score (0\.\d+) vs head \1 \(gain \+0\.0000, margin 0\.5\)", step.log)
        episodes = deployment.upstream.requests(contains="Keep answers short.")
        assert sum(1 for e in episodes if PROPOSER_MARKER not in e["raw"]) >= len(GATE_WORDS)
    else:
        assert f"training on {scenario} failed" in step.log, step
        assert "not one JSON object" in step.log

    after = deployment.harness(scenario)
    assert after["release_id"] == before["release_id"]
    assert after["files"] == before["files"] == {"system_prompt.md": SEED}
    assert mean(deployment.run_agent(scenario, HELD_OUT, suffix=f" {marker}")) < 0.2
    kind = "rejected" if outcome == "gate_rejected" else "failed"
    assert deployment.counters() == {**counted, kind: counted[kind] + 1}
