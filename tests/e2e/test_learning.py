"""The whole loop learns, measured through Reef's API: serve → report → train → gate →
release → hot reload → serve better.

Two deployments run the same test (``log_kind``):

* ``embedded``: one ``reef serve`` with no upstream (the local tiny engine, its sidecar
  following ``REEF_ENGINE_SCENARIO``) and the recipe's trainer in-process (its progress
  in GET /reef/status);
* ``kafka``: ``reef serve --log kafka`` (API, engine, sidecar) on a topic prefix of its
  own, a ``reef streams`` worker and a separate ``reef trainer --log kafka`` process
  (tests/support/learning.py).

The toy task: "Return exactly: <word>" → the word (3 to 6 letters), graded by
:func:`recipes.tasks.exact` (1.0 for the word, else partial credit by position). The mean
score of the *served* model on held-out prompts (greedy, through Reef's API) is measured
after every round.

* ``sft``: the grader reports every answer with its score and the correction (the word);
  the served score must rise from below 0.2 to above 0.7 across at least three committed
  releases. Then a deliberately worse batch (corrections are the reversed words) must be
  rejected by the gate, leaving the served outputs unchanged.
* ``grpo`` (embedded): see :func:`test_grpo_learns_from_scores_alone`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from recipes.tasks import exact
from tests.e2e.conftest import unique_scenario
from tests.support.learning import LearningDeployment, learning_deployment

pytestmark = pytest.mark.slow

TOKEN = "reef-learning-token"
TRAIN_BATCH = 128
MAX_ROUNDS = 14
TARGET = 0.7
BUDGET_S = 600.0


def pseudo_words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    found: dict[str, None] = {}
    while len(found) < count:
        size = rng.randint(3, 6)
        word = "".join(rng.choice(vowels if i % 2 else consonants) for i in range(size))
        found[word] = None
    return list(found)


WORDS = pseudo_words(620, seed=11)
TRAIN, TRAINER_EVAL, MEASURE = WORDS[:500], WORDS[500:560], WORDS[560:620]


def prompt(word: str) -> str:
    return f"Return exactly: {word}"


def write_recipe(tmp: Path, body: str) -> Path:
    """A deployment file whose recipe evaluates on the trainer's held-out words."""
    tasks = tmp / "trainer-eval.jsonl"
    tasks.write_text(
        "".join(json.dumps({"prompt": prompt(w), "answer": w}) + "\n" for w in TRAINER_EVAL)
    )
    config = tmp / "learning.yaml"
    config.write_text(
        "recipe:\n"
        f"  evaluation: {{tasks_file: {tasks.name}, max_new_tokens: 10}}\n"
        "  gate: {policy: win_margin, margin: 0.0}\n" + body
    )
    return config


Answer = tuple[str, str, str]  # (answer, receipt, serving release)


@dataclass
class Loop:
    """The running deployment, as a client sees it (plus its log, read-only)."""

    deployment: LearningDeployment
    scenario: str
    reports: int = 0

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": self.scenario}
        return httpx.Client(base_url=self.deployment.base_url, headers=headers, timeout=60.0)

    def status(self) -> dict[str, Any]:
        with self.client() as client:
            response = client.get("/reef/status")
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def ask(self, client: httpx.Client, word: str, **sampling: Any) -> Answer:
        """(answer, receipt, serving release) for one request (greedy by default)."""
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": prompt(word)}],
            "temperature": 0,
            "max_tokens": 10,
            **sampling,
        }
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()["choices"][0]["message"]["content"] or ""
        return (
            answer,
            response.headers["x-reef-agent-record-id"],
            response.headers["x-reef-release-id"],
        )

    def ask_all(self, words: list[str], **sampling: Any) -> list[Answer]:
        with self.client() as client, ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda w: self.ask(client, w, **sampling), words))

    def serving(self) -> tuple[str, str | None]:
        """(head release, release the local engine serves)."""
        scenario = self.status()["scenarios"][self.scenario]
        engine = scenario["engines"].get("local", {})
        return scenario["head_release_id"], engine.get("release_id")

    def wait_engine_on_head(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            head, served = self.serving()
            if head == served:
                return head
            time.sleep(0.25)
        raise AssertionError(f"the engine never loaded the head: {self.serving()}")

    def measure(self) -> tuple[str, float, list[str]]:
        """(head release, mean held-out score, answers) once the engine serves the head."""
        head = self.wait_engine_on_head()
        measured = self.ask_all(MEASURE)
        assert {served for _, _, served in measured} == {head}
        return head, mean_score(measured, MEASURE), [answer for answer, _, _ in measured]

    def post_reports(self, bodies: list[dict[str, Any]]) -> None:
        with self.client() as client:
            for body in bodies:
                response = client.post("/reef/report", json=body)
                assert response.status_code in (200, 201, 202), response.text
        self.reports += len(bodies)

    def report(self, results: list[Answer], words: list[str], *, inverted: bool = False) -> None:
        """One report per answer: the grader's score and the correction (the word); the
        inverted grader scores 1 - score and "corrects" to the reversed word."""
        bodies = []
        for (answer, receipt, _), word in zip(results, words, strict=True):
            score = exact(answer, word)
            bodies.append(
                {
                    "score": 1.0 - score if inverted else score,
                    "feedback": {"correction": word[::-1] if inverted else word},
                    "references": [receipt],
                }
            )
        self.post_reports(bodies)

    def trainer_done(self) -> None:
        """The trainer group's committed offsets reached the end of reef.samples: it
        commits them only once the chain decided (or the gate rejected) the batch."""
        self.deployment.wait_trainer_done(self.reports)


def mean_score(results: list[Answer], words: list[str]) -> float:
    total = sum(exact(answer, w) for (answer, _, _), w in zip(results, words, strict=True))
    return total / len(words)


def engine_env(scenario: str, recipe: str, config: Path) -> dict[str, str]:
    return {
        "REEF_TOKEN": TOKEN,
        "REEF_RECIPE": recipe,
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_ENGINE_SCENARIO": scenario,
    }


@pytest.fixture
def sft_loop(request: pytest.FixtureRequest, log_kind: str, tmp_path: Path) -> Iterator[Loop]:
    scenario = unique_scenario("learn")
    config = write_recipe(
        tmp_path,
        "  eligibility: {max_staleness: 2}\n"
        f"  batching: {{batch_size: {TRAIN_BATCH}}}\n"
        "  training: {steps: 30, learning_rate: 0.003}\n",
    )
    bootstrap = request.getfixturevalue("kafka_bootstrap") if log_kind == "kafka" else None
    with learning_deployment(
        log_kind,
        tmp_path,
        engine_env(scenario, "sft", config),
        token=TOKEN,
        group="trainer:sft",
        kafka_bootstrap=bootstrap,
    ) as deployment:
        yield Loop(deployment, scenario)


def test_the_served_model_learns_from_corrections_and_the_gate_refuses_a_worse_one(
    sft_loop: Loop,
) -> None:
    loop = sft_loop
    if loop.deployment.trainer is None:
        assert "trainer" in loop.status(), "reef serve should run the sft trainer in-process"
    started = time.monotonic()
    rng = random.Random(5)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the creation release serves)
    history: list[tuple[str, float]] = []
    for _ in range(MAX_ROUNDS):
        head, score, _ = loop.measure()
        history.append((head, score))
        print(f"release {head[:8]} served score {score:.3f}", flush=True)
        if score > TARGET and len(set(h for h, _ in history)) >= 4:
            break
        batch = rng.sample(TRAIN, TRAIN_BATCH)
        loop.report(loop.ask_all(batch), batch)
        loop.trainer_done()
    elapsed = time.monotonic() - started
    print(f"sft learning: {len(history)} rounds, {elapsed:.0f}s: {history}", flush=True)
    releases = list(dict.fromkeys(h for h, _ in history))
    assert history[0][1] < 0.2, history
    assert history[-1][1] > TARGET, history
    assert len(releases) >= 4, history  # the creation release + at least 3 committed
    assert elapsed < BUDGET_S

    def worse(words: list[str]) -> None:  # corrections are the reversed words
        loop.report(loop.ask_all(words), words, inverted=True)

    assert_worse_batch_rejected(loop, rng, worse)


def assert_worse_batch_rejected(
    loop: Loop, rng: random.Random, post_worse: Callable[[list[str]], None]
) -> None:
    """A deliberately worse batch (``post_worse`` reports inverted scores) is trained,
    rejected by the gate, and the engine keeps serving the same answers."""
    head, _, before = loop.measure()
    rejected_before = loop.deployment.wait_trainer_status()["candidates"]["rejected"]
    post_worse(rng.sample(TRAIN, TRAIN_BATCH))
    loop.trainer_done()
    time.sleep(2.0)  # a wrongly accepted release would be loaded by now
    assert loop.serving() == (head, head)
    _, _, after = loop.measure()
    assert after == before
    trainer = loop.deployment.wait_trainer_status()
    assert trainer["candidates"]["rejected"] == rejected_before + 1, trainer
    assert trainer["error"] is None
    if "steps" in trainer:  # the in-process trainer shows its step history
        assert trainer["steps"][-1]["outcome"] == "gate_rejected", trainer["steps"][-1]
    else:
        assert "rejected (gate_rejected)" in loop.deployment.trainer_log()


# ---------------------------------------------------------------------------
# grpo: learning from scores alone

GROUP_SIZE = 16  # answers sampled per prompt (one group)
PROMPTS = 8  # groups per round (one batch)
TEMPERATURE = 0.7  # exploration: the engine records the raw policy's logprobs
GRPO_CHECK_ROUNDS = 3
WARM_ROUNDS = 3


def warm_start(folder: Path) -> Path:
    """The creation release's weights: the tiny model after a short imitation warm-up
    (3 x 30 AdamW steps on 32 training words), which copies words poorly (held-out score
    below 0.2). From the random tiny model a policy gradient has nothing to work with:
    it never samples a right answer (reference/learning-notes.md)."""
    from recipes.sft import SftTraining
    from trainers.torch_backend import train_sft

    rng = random.Random(99)
    parent: Path | None = None
    for index in range(WARM_ROUNDS):
        words = rng.sample(TRAIN, 32)
        examples = [([{"role": "user", "content": prompt(w)}], w) for w in words]
        out = folder / f"warm-{index}"
        train_sft(parent, examples, out, SftTraining(steps=30, learning_rate=3e-3))
        parent = out
    assert parent is not None
    return parent


@pytest.fixture
def grpo_loop(tmp_path: Path) -> Iterator[Loop]:
    scenario = unique_scenario("grpo")
    config = write_recipe(
        tmp_path,
        "  eligibility: {max_staleness: 0}\n"
        f"  batching: {{group_by: prompt_id, group_size: {GROUP_SIZE}, batch_size: {PROMPTS}}}\n"
        "  training: {steps: 4, learning_rate: 0.0003, clip: 0.2}\n",
    )
    env = engine_env(scenario, "grpo", config)
    env["REEF_SEED_DIR"] = str(warm_start(tmp_path / "warm"))
    with learning_deployment(
        "embedded", tmp_path, env, token=TOKEN, group="trainer:grpo"
    ) as deployment:
        yield Loop(deployment, scenario)


def test_grpo_trains_gated_candidates_from_recorded_tokens(grpo_loop: Loop) -> None:
    """``grpo`` end to end, from scores alone (no correction): every round the served
    model answers each of 8 training prompts 16 times at temperature 0.7 with
    ``"logprobs": true`` (the engine's token ids and logprobs are recorded); the grader
    reports each answer's score with ``metadata.prompt_id``; the trainer forms groups by
    prompt, computes group-relative advantages, takes clipped-ratio policy steps from the
    recorded tokens and logprobs, and the gate (win_margin on 60 other held-out words)
    decides; the engine serves exactly the committed releases.

    What this does NOT show is the issue's learning target (held-out score from below 0.2
    to above 0.7): on this task the tiny model learns too slowly from a policy gradient.
    Measured (2 cores): 0.177 -> 0.199 over 40 rounds (213 s, 11 committed releases);
    offline, from the random model 0.010 -> 0.017 in 15 rounds, and from a 0.16 warm
    start about 0.20 after 40 rounds for every learning rate, group size and temperature
    tried (1e-4..3e-3, 8..16, 0.7..1.0). At that rate the gate's held-out comparison is
    within noise, so neither a rise nor the rejection of an inverted-score candidate can
    be asserted reliably (a CI run saw an inverted candidate win by noise); the sft test
    asserts both."""
    loop = grpo_loop
    started = time.monotonic()
    rng = random.Random(7)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the warm start serves)
    history: list[tuple[str, float]] = []
    for round_no in range(GRPO_CHECK_ROUNDS):
        head, score, _ = loop.measure()
        history.append((head, score))
        words = rng.sample(TRAIN, PROMPTS)
        asked = [w for w in words for _ in range(GROUP_SIZE)]
        results = loop.ask_all(asked, temperature=TEMPERATURE, logprobs=True)
        loop.post_reports(grpo_reports(results, asked, f"r{round_no}"))
        loop.trainer_done()
    head, score, _ = loop.measure()
    history.append((head, score))
    elapsed = time.monotonic() - started
    trainer = loop.status()["trainer"]
    steps = [s for s in trainer["steps"] if "training" in s]
    print(f"grpo: {len(steps)} trained batches, {elapsed:.0f}s: {history}", flush=True)
    print(
        "grpo steps: "
        + json.dumps(
            [
                {k: s.get(k) for k in ("outcome", "candidate_score", "baseline_score")}
                | {k: round(v, 3) for k, v in s["training"].items()}
                for s in steps
            ]
        ),
        flush=True,
    )
    assert history[0][1] < 0.2, history
    # every round's batch trained, on recorded tokens, on-policy (ratio 1 at the first step)
    assert len(steps) == GRPO_CHECK_ROUNDS, steps
    assert trainer["samples_skipped"].get("no_token_data", 0) == 0, trainer
    assert all(s["training"]["rollouts"] > 0 for s in steps), steps
    assert all(abs(s["training"]["ratio_first"] - 1.0) < 1e-3 for s in steps), steps
    # the gate decided every candidate by its rule (margin 0), and what serves is the
    # chain's head: committed candidates, nothing else
    for step in steps:
        assert step["outcome"] in ("committed", "gate_rejected"), step
        wins = step["candidate_score"] > step["baseline_score"]  # a tie keeps the head
        assert wins == (step["outcome"] == "committed"), step
    committed = [s["release_id"] for s in steps if s["outcome"] == "committed"]
    assert history[-1][0] == (committed[-1] if committed else history[0][0]), (history, steps)
    assert loop.serving() == (history[-1][0], history[-1][0])
    assert elapsed < BUDGET_S


def grpo_reports(
    results: list[Answer], asked: list[str], tag: str, *, inverted: bool = False
) -> list[dict[str, Any]]:
    """Scores only (1 - score when inverted), grouped by ``metadata.prompt_id``."""
    return [
        {
            "score": 1.0 - exact(answer, word) if inverted else exact(answer, word),
            "metadata": {"prompt_id": f"{tag}:{word}"},
            "references": [receipt],
        }
        for (answer, receipt, _), word in zip(results, asked, strict=True)
    ]
