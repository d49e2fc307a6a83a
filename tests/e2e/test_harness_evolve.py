"""harness_evolve end to end: failing reports → proposed edit → paired gate → harness served.

``reef serve`` on the embedded log proxies the scripted harness upstream
(tests/support/harness_upstream.py, its own process): its agent answers ``Task: <word>``
correctly (the word reversed) only when the system prompt carries the rule, and as the
proposer it answers with one JSON edit. The recipe ``harness_evolve`` runs in the
in-process trainer; every scenario starts from the seed harness (``REEF_SEED_DIR``).

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

Embedded log only: the in-process trainer runs on the embedded log (on Kafka the
trainer is a separate ``reef trainer`` process, not covered here).
"""

from __future__ import annotations

import json
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
from tests.e2e.conftest import ReefServer, launch, unique_scenario
from tests.support.harness_upstream import MALFORMED, RULE, USELESS
from tests.support.servers import UpstreamProcess, running_upstream

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


@dataclass
class Deployment:
    server: ReefServer
    upstream: UpstreamProcess

    def http(self, scenario: str | None = None) -> httpx.Client:
        return self.server.client(scenario, timeout=60.0)

    def create(self, prefix: str) -> str:
        scenario = unique_scenario(prefix)
        with self.http() as client:
            response = client.post("/reef/scenarios", json={"name": scenario})
        assert response.status_code == 201, response.text
        return scenario

    def harness(self, scenario: str) -> dict[str, Any]:
        with self.http(scenario) as client:
            response = client.get("/reef/harness")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert response.headers["x-reef-release-id"] == body["release_id"]
        return body

    def run_agent(self, scenario: str, words: list[str], suffix: str = "") -> list[Episode]:
        """Each task once, with the harness served now, through Reef (openai SDK)."""
        served = self.harness(scenario)
        system = compose(served["files"], PATTERNS)
        client = openai.OpenAI(
            base_url=self.server.v1_url,
            api_key=self.server.token,
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

    def trainer(self) -> dict[str, Any]:
        with self.http() as client:
            response = client.get("/reef/status")
        response.raise_for_status()
        status: dict[str, Any] = response.json()["trainer"]
        return status

    def step_of(self, scenario: str) -> dict[str, Any]:
        """The trainer's finished step for the scenario (waits for it)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.server.process.managed.running(), self.server.output()
            status = self.trainer()
            done = [s for s in status["steps"] if s["scenario"] == scenario and "outcome" in s]
            if done:
                assert len(done) == 1, done
                return done[0]
            skipped = [r for r in status["recent_rejections"] if r["scenario"] == scenario]
            assert not skipped, f"the trainer skipped samples of {scenario}: {skipped}"
            time.sleep(0.25)
        raise AssertionError(f"no trainer step for {scenario}: {self.trainer()}")


@dataclass(frozen=True)
class Episode:
    word: str
    answer: str
    score: float
    receipt: str
    release: str


def mean(episodes: list[Episode]) -> float:
    return sum(e.score for e in episodes) / len(episodes)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("harness-evolve")
    seed = tmp / "seed"
    seed.mkdir()
    (seed / "system_prompt.md").write_text(SEED)
    with running_upstream(tmp / "upstream", module="tests.support.harness_upstream") as upstream:
        server = launch(
            "embedded",
            upstream=upstream,
            state_dir=tmp / "state",
            env={
                "REEF_RECIPE": "harness_evolve",
                "REEF_RECIPE_CONFIG": str(recipe_yaml(tmp)),
                "REEF_SEED_DIR": str(seed),
            },
            timeout=120.0,
        )
        try:
            yield Deployment(server, upstream)
        finally:
            server.stop()


def test_an_edit_that_fixes_the_failures_is_committed_and_served(deployment: Deployment) -> None:
    scenario = deployment.create("fix")
    before = deployment.harness(scenario)
    assert before["files"] == {"system_prompt.md": SEED}
    assert before["parent_release_id"] is None

    failures = deployment.run_agent(scenario, TRAIN_WORDS)
    assert [e.answer for e in failures] == TRAIN_WORDS  # no rule: the word, not reversed
    assert mean(failures) < 0.2
    assert mean(deployment.run_agent(scenario, HELD_OUT)) < 0.2  # held out: no report
    deployment.report(scenario, failures)

    step = deployment.step_of(scenario)
    assert step["outcome"] == "committed", step
    assert step["parent_release_id"] == before["release_id"]
    assert step["baseline_score"] < 0.2 and step["candidate_score"] == 1.0

    after = deployment.harness(scenario)
    assert after["release_id"] == step["release_id"] != before["release_id"]
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
    pinned = httpx.get(
        f"{deployment.server.base_url}/reef/harness",
        params={"release_id": before["release_id"]},
        headers=deployment.server.headers(scenario),
        timeout=30.0,
    )
    assert pinned.json()["files"] == {"system_prompt.md": SEED}  # history kept

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
    counted = deployment.trainer()["candidates"]
    deployment.report(scenario, failures)

    step = deployment.step_of(scenario)
    assert step["outcome"] == outcome, step
    assert "proposal_id" not in step  # nothing was proposed to the chain
    if outcome == "gate_rejected":
        # both harnesses ran the task set; the useless rule reached the candidate's episodes
        assert step["candidate_score"] == step["baseline_score"] < 0.2
        assert "gain +0.0000" in step["reason"]
        episodes = deployment.upstream.requests(contains="Keep answers short.")
        assert sum(1 for e in episodes if PROPOSER_MARKER not in e["raw"]) >= len(GATE_WORDS)
    else:
        assert "not one JSON object" in step["reason"]

    after = deployment.harness(scenario)
    assert after["release_id"] == before["release_id"]
    assert after["files"] == before["files"] == {"system_prompt.md": SEED}
    assert mean(deployment.run_agent(scenario, HELD_OUT, suffix=f" {marker}")) < 0.2
    trainer = deployment.trainer()
    assert trainer["error"] is None
    kind = "rejected" if outcome == "gate_rejected" else "failed"
    assert trainer["candidates"]["accepted"] == counted["accepted"]
    assert trainer["candidates"][kind] == counted[kind] + 1
