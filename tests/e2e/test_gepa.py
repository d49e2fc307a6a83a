"""``gepa`` end to end through the HTTP API, on both logs (tests/support/learning.py: on
the embedded log the trainer runs inside ``reef serve``; on Kafka it is a ``reef trainer``
process beside ``reef serve`` and a ``reef streams`` worker). ``reef serve`` proxies the
scripted stand-in (:mod:`reef.testing.harness_upstream`, the session's ``harness_upstream``),
which plays the agent, the task model of the recipe's episodes and the reflection model.

An agent (the openai SDK through Reef) works on tasks with the served harness and
reports each grade with its reference answer. The first batch makes the recipe reflect
on the seed's failures: the child carries the rule, beats its parent on the minibatch and
the served tree on the validation tasks, and is committed; the held-out score rises from
the seed's to 1.0 under the new release. The second batch leads to a worse child (the
reflection drops the rule): rejected on the minibatch, nothing is published, the
release keeps serving.
"""

from __future__ import annotations

import json
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
from recipes.tasks import exact
from reef.testing.harness_upstream import RULE, USELESS
from reef.testing.servers import UpstreamProcess
from tests.support.api import unique_scenario
from tests.support.learning import LearningDeployment, learning_deployment
from tests.support.reef_server import LOG_KINDS

pytestmark = pytest.mark.slow

PATTERNS = ["system_prompt.md", "skills/*.md", "rules/*.md"]
SEED = "You are a careful assistant.\nAnswer each task with a single word and nothing else.\n"
VALIDATION = ["lantern", "pebble", "harbor", "violet"]
TRAIN = ["otter", "maple", "quartz"]
HELD_OUT = ["falcon", "copper", "tundra", "walnut", "saffron"]
GROUP = "trainer:gepa"
STEP_TIMEOUT_S = 120.0


def recipe_yaml(tmp: Path) -> Path:
    tasks = tmp / "validation.jsonl"
    tasks.write_text(
        "".join(json.dumps({"prompt": f"Task: {w}", "answer": w[::-1]}) + "\n" for w in VALIDATION)
    )
    config = tmp / "gepa.yaml"
    config.write_text(
        f"""
recipe:
  batching: {{batch-size: {len(TRAIN)}}}
  upstream: {{model: stub-model, seed: 0}}
  harness: {{files: {json.dumps(PATTERNS)}}}
  evaluation: {{tasks-file: {tasks.name}, grader: exact, max-new-tokens: 32}}
  gepa: {{seed: 0, answer-key: answer}}
"""
    )
    return config


@dataclass(frozen=True)
class Episode:
    task: str
    answer: str
    score: float
    receipt: str
    release: str


@dataclass
class Deployment:
    loop: LearningDeployment

    def http(self, scenario: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.loop.token}"}
        if scenario is not None:
            headers["x-reef-scenario"] = scenario
        return httpx.Client(base_url=self.loop.base_url, headers=headers, timeout=60.0)

    def get(self, scenario: str, path: str) -> dict[str, Any]:
        with self.http(scenario) as client:
            response = client.get(path)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def run_agent(self, scenario: str, tasks: list[tuple[str, str]]) -> list[Episode]:
        """Each (task, reference answer) once under the served harness, through Reef."""
        served = self.get(scenario, "/reef/harness")
        system = compose(served["files"], PATTERNS)
        client = openai.OpenAI(
            base_url=f"{self.loop.base_url}/v1",
            api_key=self.loop.token,
            default_headers={"x-reef-scenario": scenario},
            max_retries=0,
        )
        episodes = []
        with client:
            for task, answer in tasks:
                raw = client.chat.completions.with_raw_response.create(
                    model="stub-model",
                    messages=[
                        {"role": "system", "content": system},
                        {"role": "user", "content": task},
                    ],
                    temperature=0,
                )
                output = raw.parse().choices[0].message.content or ""
                episodes.append(
                    Episode(
                        task,
                        answer,
                        exact(output, answer),
                        raw.headers["x-reef-agent-record-id"],
                        raw.headers["x-reef-release-id"],
                    )
                )
        assert {e.release for e in episodes} == {served["release_id"]}
        return episodes

    def report(self, scenario: str, episodes: list[Episode]) -> None:
        with self.http(scenario) as client:
            for e in episodes:
                body = {
                    "score": e.score,
                    "feedback": {"expected": e.answer},
                    "metadata": {"answer": e.answer},
                    "references": [e.receipt],
                }
                response = client.post("/reef/report", json=body)
                assert response.status_code in (200, 201, 202), response.text

    def decided(self, scenario: str, before: dict[str, int]) -> tuple[str, dict[str, int]]:
        """The outcome of the trainer's next decision (accepted, rejected or failed) and
        its counters then."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            self.loop.alive()
            status = self.loop.wait_trainer_status()
            assert status["error"] is None, status
            skipped = [r for r in status["recent_rejections"] if r["scenario"] == scenario]
            assert not skipped, skipped
            counters: dict[str, int] = status["candidates"]
            grown = [k for k, v in counters.items() if v > before.get(k, 0)]
            if grown:
                assert len(grown) == 1, (before, counters)
                return grown[0], dict(counters)
            time.sleep(0.1)
        raise AssertionError(f"no trainer decision for {scenario}\n{self.loop.trainer_output()}")


def reversal(words: list[str], suffix: str = "") -> list[tuple[str, str]]:
    return [(f"Task: {w}{suffix}", w[::-1]) for w in words]


def mean(episodes: list[Episode]) -> float:
    return sum(e.score for e in episodes) / len(episodes)


@pytest.fixture(scope="module", params=LOG_KINDS)
def deployment(
    request: pytest.FixtureRequest,
    harness_upstream: UpstreamProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    kind: str = request.param
    bootstrap = request.getfixturevalue("kafka_topics") if kind == "kafka" else None
    tmp = tmp_path_factory.mktemp(f"gepa-{kind}")
    seed = tmp / "seed"
    seed.mkdir()
    (seed / "system_prompt.md").write_text(SEED)
    token = f"reef-tok-{secrets.token_hex(8)}"
    env = {
        "REEF_TOKEN": token,
        "REEF_UPSTREAM_URL": harness_upstream.v1_url,
        "REEF_UPSTREAM_DIALECT": "openai",
        "REEF_UPSTREAM_API_KEY": f"sk-upstream-{secrets.token_hex(8)}",
        "REEF_RECIPE": "gepa",
        "REEF_RECIPE_CONFIG": str(recipe_yaml(tmp)),
        "REEF_SEED_DIR": str(seed),
    }
    with learning_deployment(
        kind, tmp, env, token=token, group=GROUP, kafka_bootstrap=bootstrap
    ) as loop:
        yield Deployment(loop)


def test_gepa_raises_the_held_out_score_and_rejects_a_worse_child(
    deployment: Deployment,
) -> None:
    scenario = unique_scenario("gepa")
    with deployment.http() as client:
        assert client.post("/reef/scenarios", json={"name": scenario}).status_code == 201
    seed = deployment.get(scenario, "/reef/harness")
    assert seed["files"] == {"system_prompt.md": SEED}
    before = mean(deployment.run_agent(scenario, reversal(HELD_OUT)))
    assert before < 0.2

    deployment.report(scenario, deployment.run_agent(scenario, reversal(TRAIN)))
    outcome, counted = deployment.decided(scenario, {})  # the deployment's first decision
    assert outcome == "accepted"
    first = deployment.get(scenario, "/reef/harness")
    assert first["parent_release_id"] == seed["release_id"]
    assert first["files"] == {"system_prompt.md": SEED + RULE + "\n"}
    verdict = first["evaluation"]
    assert verdict["decision"] == {
        "selected": True,
        "policy": "gepa_strict_mean",
        "reason": verdict["decision"]["reason"],
    }
    assert verdict["candidate"]["score"] == 1.0 > verdict["baseline"]["score"]
    after = deployment.run_agent(scenario, reversal(HELD_OUT))
    assert mean(after) == 1.0 > before
    assert {e.release for e in after} == {first["release_id"]}

    # a batch that leads the reflection to drop the rule: worse on the minibatch
    worse = [*reversal(TRAIN[:2], f" {USELESS}"), ("Task: x", "unreachable")]
    deployment.report(scenario, deployment.run_agent(scenario, worse))
    assert deployment.decided(scenario, counted)[0] == "failed"
    log = deployment.loop.trainer_log()
    assert "child rejected: minibatch" in log and "<= parent" in log

    catalogue = deployment.get(scenario, "/reef/harness/releases")
    assert catalogue["head"] == first["release_id"]
    ids = [r["release_id"] for r in catalogue["releases"]]
    assert ids == [seed["release_id"], first["release_id"]]  # nothing else, nothing pending
    assert mean(deployment.run_agent(scenario, reversal(HELD_OUT))) == 1.0
