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

The three scenarios below are set up together (fixture ``trials``): their failing
batches are reported at once and the trainer decides each (batches are per scenario), so
the deployment's latencies overlap; each test then checks one scenario's outcome, read
from the trainer's log lines naming that scenario.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from recipes.harness_edits import compose
from recipes.harness_evolve import PROPOSER_MARKER
from recipes.tasks import exact
from reef.testing.harness_upstream import MALFORMED, RULE, STYLE, USELESS
from reef.testing.servers import UpstreamProcess
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
HISTORY = 2000  # the upstream keeps as many requests


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
#: the trainer's log line about a scenario's decided batch, per outcome
DECIDED = {
    "committed": "committed for {scenario}",
    "gate_rejected": "candidate for {scenario} rejected (gate_rejected)",
    "training_failed": "training on {scenario} failed",
}
#: the proposer's answer each scenario's batch leads to (a marker in its tasks)
MARKERS = {"fix": "", "useless": USELESS, "malformed": MALFORMED}


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


@dataclass(frozen=True)
class Trial:
    """One scenario's failing batch, reported, and the trainer's decision on it."""

    scenario: str
    suffix: str  # appended to every task (the proposer's marker)
    before: dict[str, Any]  # the harness served before the report
    failures: list[Episode]  # the reported batch
    held_out_before: float  # the held-out score before the report (``fix`` only)
    step: Step


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

    def steps_of(self, scenarios: list[str]) -> dict[str, Step]:
        """Wait until the trainer decided each scenario's batch (its log names the
        scenario with the outcome); fail fast if it skipped one's samples."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        self.loop.wait_trainer_status()  # one at least (``reef trainer`` logs it)
        while time.monotonic() < deadline:
            self.loop.alive()
            status = self.loop.trainer_status()
            assert status["error"] is None, status
            skipped = [r for r in status["recent_rejections"] if r["scenario"] in scenarios]
            assert not skipped, f"the trainer skipped samples: {skipped}"
            lines = self.loop.trainer_log().splitlines()
            steps = {}
            for scenario in scenarios:
                log = "\n".join(line for line in lines if scenario in line)
                found = [o for o, text in DECIDED.items() if text.format(scenario=scenario) in log]
                assert len(found) <= 1, log
                if found:
                    steps[scenario] = Step(found[0], log)
            if len(steps) == len(scenarios):
                return steps
            time.sleep(0.1)
        raise AssertionError(f"no trainer decisions for {scenarios}\n{self.loop.trainer_output()}")


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
    tmp = tmp_path_factory.mktemp(f"harness-evolve-{kind}")
    seed = tmp / "seed"
    seed.mkdir()
    (seed / "system_prompt.md").write_text(SEED)
    token = f"reef-tok-{secrets.token_hex(8)}"
    env = {
        "REEF_TOKEN": token,
        "REEF_UPSTREAM_URL": harness_upstream.v1_url,
        "REEF_UPSTREAM_DIALECT": "openai",
        "REEF_UPSTREAM_API_KEY": f"sk-upstream-{secrets.token_hex(8)}",
        "REEF_RECIPE": "harness_evolve",
        "REEF_RECIPE_CONFIG": str(recipe_yaml(tmp)),
        "REEF_SEED_DIR": str(seed),
    }
    with learning_deployment(
        kind, tmp, env, token=token, group=GROUP, kafka_bootstrap=bootstrap
    ) as loop:
        yield Deployment(loop, harness_upstream)


@dataclass(frozen=True)
class Trials:
    by_name: dict[str, Trial]  # keys of MARKERS
    proposals: list[dict[str, Any]]  # proposer requests the upstream saw meanwhile
    styled: list[dict[str, Any]]  # requests showing the useless rule, meanwhile


@pytest.fixture(scope="module")
def trials(deployment: Deployment) -> Trials:
    """Each scenario of :data:`MARKERS` fails its batch (the agents work side by side),
    reported at once; every batch decided exactly once (the fresh trainer's counters
    show one decision per outcome, nothing else)."""
    upstream = deployment.upstream
    seen_proposals = len(upstream.requests(contains=PROPOSER_MARKER, limit=HISTORY))
    seen_styled = len(upstream.requests(contains=STYLE, limit=HISTORY))

    def fail(name: str) -> tuple[str, str, dict[str, Any], list[Episode], float]:
        scenario = deployment.create(name)
        suffix = f" {MARKERS[name]}" if MARKERS[name] else ""
        before = deployment.harness(scenario)
        failures = deployment.run_agent(scenario, TRAIN_WORDS, suffix=suffix)
        held_out = mean(deployment.run_agent(scenario, HELD_OUT)) if name == "fix" else 0.0
        return scenario, suffix, before, failures, held_out

    with ThreadPoolExecutor(len(MARKERS)) as pool:
        setups = dict(zip(MARKERS, pool.map(fail, MARKERS), strict=True))
        list(pool.map(lambda setup: deployment.report(setup[0], setup[3]), setups.values()))
    steps = deployment.steps_of([setup[0] for setup in setups.values()])
    decided = {k: v for k, v in deployment.counters().items() if v}
    assert decided == {"accepted": 1, "rejected": 1, "failed": 1}, decided
    return Trials(
        {name: Trial(*setup, steps[setup[0]]) for name, setup in setups.items()},
        upstream.requests(contains=PROPOSER_MARKER, limit=HISTORY)[seen_proposals:],
        upstream.requests(contains=STYLE, limit=HISTORY)[seen_styled:],
    )


def test_an_edit_that_fixes_the_failures_is_committed_and_served(
    deployment: Deployment, trials: Trials
) -> None:
    trial = trials.by_name["fix"]
    scenario, before, failures = trial.scenario, trial.before, trial.failures
    assert before["files"] == {"system_prompt.md": SEED}
    assert before["parent_release_id"] is None
    assert [e.answer for e in failures] == TRAIN_WORDS  # no rule: the word, not reversed
    assert mean(failures) < 0.2
    assert trial.held_out_before < 0.2
    assert trial.step.outcome == "committed", trial.step

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
    # (the other scenarios' requests carry their markers)
    shown = [
        p
        for p in trials.proposals
        if any(f"Task: {w}" in p["raw"] for w in TRAIN_WORDS)
        and USELESS not in p["raw"]
        and MALFORMED not in p["raw"]
    ]
    assert len(shown) == 1 and shown[0]["body"]["temperature"] == 0
    assert shown[0]["path"] == "/v1/chat/completions"

    # the served agent is better on held-out tasks, under the new release
    improved = deployment.run_agent(scenario, HELD_OUT)
    assert mean(improved) == 1.0
    assert {e.release for e in improved} == {after["release_id"]}


@pytest.mark.parametrize(
    ("name", "outcome"), [("useless", "gate_rejected"), ("malformed", "training_failed")]
)
def test_an_edit_that_does_not_help_leaves_the_harness_unchanged(
    deployment: Deployment, trials: Trials, name: str, outcome: str
) -> None:
    trial = trials.by_name[name]
    scenario, step = trial.scenario, trial.step
    assert mean(trial.failures) < 0.2
    assert step.outcome == outcome, step
    if outcome == "gate_rejected":
        # both harnesses ran the task set (a tie); the useless rule reached the
        # candidate's episodes
        assert re.search(r"score (0\.\d+) vs head \1 \(gain \+0\.0000, margin 0\.5\)", step.log)
        episodes = [e for e in trials.styled if PROPOSER_MARKER not in e["raw"]]
        assert len(episodes) >= len(GATE_WORDS)
    else:
        assert "not one JSON object" in step.log

    after = deployment.harness(scenario)
    assert after["release_id"] == trial.before["release_id"]
    assert after["files"] == trial.before["files"] == {"system_prompt.md": SEED}
    assert mean(deployment.run_agent(scenario, HELD_OUT, suffix=trial.suffix)) < 0.2
