"""The learning loop of the end-to-end learning tests: a toy task, its recipe file, and
a :class:`Loop` that asks the served model, reports scores or corrections, and waits for
the trainer's releases (:func:`learn_until_target`, :func:`assert_worse_batch_rejected`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from recipes.tasks import exact
from tests.support.learning import LearningDeployment

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


@dataclass(frozen=True)
class ToyTask:
    """A toy task on a word: the prompt and the expected answer, graded by
    :func:`recipes.tasks.exact` (1.0 for the answer, else partial credit by position)."""

    instruction: str
    answer: Callable[[str], str]

    def prompt(self, word: str) -> str:
        return f"{self.instruction}{word}"

    def score(self, output: str, word: str) -> float:
        return exact(output, self.answer(word))


COPY = ToyTask("Return exactly: ", lambda word: word)
FIRST_LETTER = ToyTask("First letter of: ", lambda word: word[0])


def prompt(word: str) -> str:
    return COPY.prompt(word)


#: imitation rounds of :func:`copy_warm_start`
WARM_ROUNDS = 8


def copy_warm_start(
    folder: Path, *, base_model: str | None = None, rounds: int = WARM_ROUNDS
) -> Path:
    """Weights for a creation release: the model (the tiny one, or the ``base_model``
    folder) after a short imitation warm-up on the *copy* task (``rounds`` x 30 AdamW
    steps on 32 training words each), written under ``folder``. It has never seen
    "First letter of: <word>", to which the tiny model answers with (a garbled copy of)
    the whole word: a low held-out score (partial credit for the first letter). From
    the random tiny model a policy gradient has nothing to work with: it never samples a
    right answer. Deterministic: the e2e suite builds the
    tiny one once (``copy_warm_start_dir``, tests/e2e/conftest.py) for the grpo and sao
    tests."""
    from recipes.training import SftTraining
    from trainers.backends.torch_backend import train_sft

    rng = random.Random(99)
    options = SftTraining(steps=30, learning_rate=3e-3)
    if base_model is not None:
        options = SftTraining(base_model=base_model, steps=30, learning_rate=3e-3)
    parent: Path | None = None
    for index in range(rounds):
        words = rng.sample(TRAIN, 32)
        examples = [([{"role": "user", "content": COPY.prompt(w)}], w) for w in words]
        out = folder / f"warm-{index}"
        train_sft(parent, examples, out, options)
        parent = out
    assert parent is not None
    return parent


def write_recipe(
    tmp: Path, body: str, task: ToyTask = COPY, gate: str = "{policy: win_margin, margin: 0.0}"
) -> Path:
    """A deployment file whose recipe evaluates on the trainer's held-out words."""
    tasks = tmp / "trainer-eval.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"prompt": task.prompt(w), "answer": task.answer(w)}) + "\n"
            for w in TRAINER_EVAL
        )
    )
    config = tmp / "learning.yaml"
    config.write_text(
        "recipe:\n"
        f"  evaluation: {{tasks_file: {tasks.name}, max_new_tokens: 10}}\n"
        f"  gate: {gate}\n" + body
    )
    return config


Answer = tuple[str, str, str]  # (answer, receipt, serving release)


@dataclass
class Loop:
    """The running deployment, as a client sees it (plus its log, read-only)."""

    deployment: LearningDeployment
    scenario: str
    task: ToyTask = COPY
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
            "messages": [{"role": "user", "content": self.task.prompt(word)}],
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
        return head, mean_score(measured, MEASURE, self.task), [a for a, _, _ in measured]

    def post_reports(self, bodies: list[dict[str, Any]], *, concurrent: bool = False) -> None:
        """One at a time, in order: the sft trainer's micro-batches follow the order of
        the samples, and so do a seed's figures. ``concurrent``: 4 at a time, like the
        answers, for trainers that step on a whole batch at once (grpo, sao: a seed learns
        the same in any order)."""

        def post(client: httpx.Client, body: dict[str, Any]) -> None:
            response = client.post("/reef/report", json=body)
            assert response.status_code in (200, 201, 202), response.text

        with self.client() as client, ThreadPoolExecutor(4 if concurrent else 1) as pool:
            list(pool.map(lambda body: post(client, body), bodies))
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
        self.deployment.wait_trainer_done(self.reports, scenario=self.scenario)


def mean_score(results: list[Answer], words: list[str], task: ToyTask = COPY) -> float:
    total = sum(task.score(answer, w) for (answer, _, _), w in zip(results, words, strict=True))
    return total / len(words)


def engine_env(scenario: str, recipe: str, config: Path) -> dict[str, str]:
    return {
        "REEF_TOKEN": TOKEN,
        "REEF_RECIPE": recipe,
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_ENGINE_SCENARIO": scenario,
    }


def learn_until_target(
    loop: Loop,
    name: str,
    one_round: Callable[[int], None],
    max_rounds: int,
    budget_s: float = BUDGET_S,
) -> list[tuple[str, float]]:
    """Measure the served model, train a round (``one_round`` posts its reports), repeat
    until it scores above TARGET with at least 3 committed releases; assert it rose from
    below 0.2 within ``budget_s``. Returns (serving release, held-out score) per round."""
    started = time.monotonic()
    history: list[tuple[str, float]] = []
    for round_no in range(max_rounds):
        head, score, _ = loop.measure()  # every answer's receipt names the head
        history.append((head, score))
        print(f"{name}: release {head[:8]} served score {score:.3f}", flush=True)
        if score > TARGET and len({h for h, _ in history}) >= 4:
            break
        one_round(round_no)
        loop.trainer_done()
    elapsed = time.monotonic() - started
    print(f"{name} learning: {len(history)} rounds, {elapsed:.0f}s: {history}", flush=True)
    releases = list(dict.fromkeys(h for h, _ in history))
    assert history[0][1] < 0.2, history
    assert history[-1][1] > TARGET, history
    assert len(releases) >= 4, history  # the creation release + at least 3 committed
    assert elapsed < budget_s
    return history


def assert_worse_batch_rejected(loop: Loop, post_worse: Callable[[], None]) -> None:
    """A deliberately worse batch (``post_worse`` reports inverted scores) is trained,
    rejected by the gate, and the engine keeps serving the same answers."""
    head, _, before = loop.measure()
    counted = loop.deployment.wait_trainer_status()
    post_worse()
    loop.trainer_done()
    # the trainer commits its offsets only after deciding: it proposed nothing, so no
    # release can follow (no need to wait for one to be loaded)
    trainer = loop.deployment.wait_trainer_status()
    assert trainer["candidates"]["rejected"] == counted["candidates"]["rejected"] + 1, trainer
    assert trainer["proposals"] == counted["proposals"], trainer
    assert trainer["error"] is None
    assert loop.serving() == (head, head)
    _, _, after = loop.measure()
    assert after == before
    if "steps" in trainer:  # the in-process trainer shows its step history
        last = trainer["steps"][-1]
        decided = {k: last.get(k) for k in ("outcome", "candidate_score", "baseline_score")}
        print(f"worse batch: {decided}", flush=True)
        assert last["outcome"] == "gate_rejected", last
    else:
        assert "rejected (gate_rejected)" in loop.deployment.trainer_log()
