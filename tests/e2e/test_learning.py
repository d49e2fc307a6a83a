"""The whole loop learns, measured through Reef's API: serve → report → train → gate →
release → hot reload → serve better.

Embedded default: ``reef serve`` with no upstream (the local tiny engine, its sidecar
following ``REEF_ENGINE_SCENARIO``), recipe ``sft`` and its trainer, all in the one
``reef serve`` process (its progress shows in GET /reef/status). The toy
task: "Return exactly: <word>" → the word (3 to 6 letters). A programmatic grader posts a
report per answer with the score and the correction (the word). The mean score of the
*served* model on held-out prompts (greedy, through Reef's API) must rise from below
0.2 to above 0.7 across at least three committed releases. Then a deliberately worse
batch (corrections are the reversed words) must be rejected by the gate, leaving the
served outputs unchanged.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from recipes.tasks import exact
from reef.topics import SAMPLES
from tests.e2e.conftest import open_log, unique_scenario
from tests.support.servers import ReefProcess, start_reef

pytestmark = pytest.mark.slow

TRAIN_BATCH = 128
MAX_ROUNDS = 14
TARGET = 0.7
BUDGET_S = 600.0
GROUP = "trainer:sft"


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


def recipe_yaml(tmp: Path) -> Path:
    tasks = tmp / "trainer-eval.jsonl"
    tasks.write_text(
        "".join(json.dumps({"prompt": prompt(w), "answer": w}) + "\n" for w in TRAINER_EVAL)
    )
    config = tmp / "learning.yaml"
    config.write_text(
        f"""
recipe:
  eligibility: {{max_staleness: 2}}
  batching: {{batch_size: {TRAIN_BATCH}}}
  training: {{steps: 30, learning_rate: 0.003}}
  evaluation: {{tasks_file: {tasks.name}, max_new_tokens: 10}}
  gate: {{policy: win_margin, margin: 0.0}}
"""
    )
    return config


@dataclass
class Loop:
    """The running deployment, as a client sees it (plus its log, read-only)."""

    reef: ReefProcess
    scenario: str
    token: str

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}", "x-reef-scenario": self.scenario}
        return httpx.Client(base_url=self.reef.base_url, headers=headers, timeout=60.0)

    def status(self) -> dict[str, Any]:
        with self.client() as client:
            response = client.get("/reef/status")
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def ask(self, client: httpx.Client, word: str) -> tuple[str, str, str]:
        """(answer, receipt, serving release) for one greedy request."""
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": prompt(word)}],
            "temperature": 0,
            "max_tokens": 10,
        }
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        answer = response.json()["choices"][0]["message"]["content"] or ""
        return (
            answer,
            response.headers["x-reef-agent-record-id"],
            response.headers["x-reef-release-id"],
        )

    def ask_all(self, words: list[str]) -> list[tuple[str, str, str]]:
        with self.client() as client, ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda w: self.ask(client, w), words))

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

    def report(
        self, results: list[tuple[str, str, str]], words: list[str], *, inverted: bool = False
    ) -> None:
        """One report per answer: the grader's score and the correction (the word); the
        inverted grader scores 1 - score and "corrects" to the reversed word."""
        with self.client() as client:
            for (answer, receipt, _), word in zip(results, words, strict=True):
                score = exact(answer, word)
                body = {
                    "score": 1.0 - score if inverted else score,
                    "feedback": {"correction": word[::-1] if inverted else word},
                    "references": [receipt],
                }
                response = client.post("/reef/report", json=body)
                assert response.status_code in (200, 201, 202), response.text

    def trainer_done(self, timeout: float = 120.0) -> None:
        """Wait until the trainer group's committed offsets reach the end of reef.samples:
        it commits them only once the chain decided (or the gate rejected) the batch."""

        async def caught_up() -> bool:
            log = open_log("embedded", self.reef.state_dir, None)
            try:
                ends = await log.end_offsets(SAMPLES)
                done = await log.committed(GROUP, SAMPLES)
            finally:
                await log.close()
            return sum(ends.values()) > 0 and all(done.get(p, 0) >= e for p, e in ends.items())

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.reef.managed.running(), self.reef.output()
            if asyncio.run(caught_up()):
                return
            time.sleep(0.5)
        raise AssertionError("the trainer did not finish the batch in time")


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    token = "reef-learning-token"
    scenario = unique_scenario("learn")
    config = recipe_yaml(tmp_path)
    env = {
        "REEF_TOKEN": token,
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(config),
        "REEF_ENGINE_SCENARIO": scenario,
    }
    state = tmp_path / "state"
    reef = start_reef([], env=env, state_dir=state, timeout=240.0, name="reef-learning")
    try:
        yield Loop(reef, scenario, token)
    finally:
        reef.stop()


def mean_score(results: list[tuple[str, str, str]], words: list[str]) -> float:
    return sum(exact(answer, w) for (answer, _, _), w in zip(results, words, strict=True)) / len(
        words
    )


def test_the_served_model_learns_from_corrections_and_the_gate_refuses_a_worse_one(
    loop: Loop,
) -> None:
    assert "trainer" in loop.status(), "reef serve should run the sft trainer in-process"
    started = time.monotonic()
    rng = random.Random(5)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the creation release serves)
    history: list[tuple[str, float]] = []
    for _ in range(MAX_ROUNDS):
        head = loop.wait_engine_on_head()
        measured = loop.ask_all(MEASURE)
        assert {served for _, _, served in measured} == {head}
        history.append((head, mean_score(measured, MEASURE)))
        print(f"release {head[:8]} served score {history[-1][1]:.3f}", flush=True)
        if history[-1][1] > TARGET and len(set(h for h, _ in history)) >= 4:
            break
        batch = rng.sample(TRAIN, TRAIN_BATCH)
        loop.report(loop.ask_all(batch), batch)
        loop.trainer_done()
    elapsed = time.monotonic() - started
    print(f"learning: {len(history)} rounds, {elapsed:.0f}s: {history}", flush=True)
    releases = list(dict.fromkeys(h for h, _ in history))
    assert history[0][1] < 0.2, history
    assert history[-1][1] > TARGET, history
    assert len(releases) >= 4, history  # the creation release + at least 3 committed
    assert elapsed < BUDGET_S

    # a deliberately worse batch: every correction is the reversed word
    head = loop.wait_engine_on_head()
    before = [answer for answer, _, _ in loop.ask_all(MEASURE)]
    batch = rng.sample(TRAIN, TRAIN_BATCH)
    loop.report(loop.ask_all(batch), batch, inverted=True)
    loop.trainer_done()
    time.sleep(2.0)  # a wrongly accepted release would be loaded by now
    assert loop.serving() == (head, head)
    after = [answer for answer, _, _ in loop.ask_all(MEASURE)]
    assert after == before
    trainer = loop.status()["trainer"]  # the in-process trainer's progress
    assert trainer["candidates"]["rejected"] >= 1
    assert trainer["steps"][-1]["outcome"] == "gate_rejected", trainer["steps"][-1]
    assert trainer["error"] is None
