"""``sao`` end to end on both logs: single scored rollouts raise the served score.

``embedded``: one ``reef serve`` with no upstream (the local tiny engine hot-loading the
scenario's releases, the ``sao`` trainer in-process); ``kafka``: ``reef serve --log kafka``
(API, engine, sidecar), the module's shared ``reef streams`` worker and a separate
``reef trainer --log kafka`` (tests/support/learning.py). ``record_tokens`` is on, so the
engine records every answer's token ids and generation-time logprobs. The task is "First
letter of: <word>" (:data:`tests.support.learning_loop.FIRST_LETTER`) from a warm start
that copies words (it answers with a garbled copy of the word: partial credit only).
Every round the served model answers 128 distinct training prompts once each at
temperature 1, and the grader reports each answer's score against its one receipt: no
group, no correction. The held-out score of the served model (greedy, 60 other words,
through Reef's API) is measured on every committed release.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import unique_scenario
from tests.support.learning import KafkaLearningLog, learning_deployment
from tests.support.learning_loop import (
    FIRST_LETTER,
    MEASURE,
    TOKEN,
    TRAIN,
    Loop,
    engine_env,
)

pytestmark = pytest.mark.slow

ROLLOUTS = 128  # distinct prompts per round: one batch, one candidate, one release
ROUNDS = 3
TRAINING = (
    "  training: {learning_rate: 0.001, epochs: 4, warmup_steps: 2, critic_steps_per_actor: 2}\n"
)


@pytest.fixture
def sao_loop(
    log_kind: str,
    learning_log: KafkaLearningLog | None,
    tmp_path: Path,
    copy_warm_start_dir: Path,
) -> Iterator[Loop]:
    scenario = unique_scenario("sao")
    config = tmp_path / "sao.yaml"
    config.write_text(f"recipe:\n  batching: {{batch_size: {ROLLOUTS}}}\n{TRAINING}")
    env = engine_env(scenario, "sao", config)
    env["REEF_RECORD_TOKENS"] = "true"
    env["REEF_SEED_DIR"] = str(copy_warm_start_dir)
    with learning_deployment(
        log_kind, tmp_path, env, token=TOKEN, group="trainer:sao", kafka_log=learning_log
    ) as deployment:
        yield Loop(deployment, scenario, FIRST_LETTER)


def test_single_scored_rollouts_raise_the_served_score_across_releases(sao_loop: Loop) -> None:
    """Three rounds, three committed releases (gate ``always``): the served held-out
    score must rise from below 0.2 to above 0.5 (the engine's sampling is seeded per
    request, so a run repeats)."""
    loop = sao_loop
    rng = random.Random(7)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the warm start serves)
    history = [loop.measure()[:2]]
    for _ in range(ROUNDS):
        sao_round(loop, rng)
        loop.trainer_done()
        history.append(loop.measure()[:2])
    print(f"sao served held-out score per release: {history}", flush=True)
    assert_said_what_it_serves(loop)
    assert len({release for release, _ in history}) == ROUNDS + 1, history  # all committed
    assert history[0][1] < 0.2, history
    assert history[-1][1] > 0.5, history
    assert_trained_on_engine_logprobs(loop)


def sao_round(loop: Loop, rng: random.Random) -> None:
    """One answer to each of ROLLOUTS distinct training prompts, each reported alone."""
    words = rng.sample(TRAIN, ROLLOUTS)
    seeds = [rng.randrange(2**31) for _ in words]
    with loop.client() as client, ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(
                lambda pair: loop.ask(client, pair[0], temperature=1.0, seed=pair[1]),
                zip(words, seeds, strict=True),
            )
        )
    bodies: list[dict[str, Any]] = [
        {"score": loop.task.score(answer, word), "references": [receipt]}
        for (answer, receipt, _), word in zip(results, words, strict=True)
    ]
    loop.post_reports(bodies, concurrent=True)


def assert_trained_on_engine_logprobs(loop: Loop) -> None:
    """Every sample carried the engine's logprobs and every step trained on-policy
    (ratio 1 at the first policy update); the first candidate warmed the critic up first."""
    trainer = loop.deployment.wait_trainer_status()
    assert trainer["error"] is None, trainer
    assert trainer["samples_skipped"].get("no_engine_logprobs", 0) == 0, trainer
    if "steps" not in trainer:  # reef trainer on Kafka logs no step history
        assert trainer["candidates"]["accepted"] == ROUNDS, trainer
        return
    steps = [s for s in trainer["steps"] if "training" in s]
    print("sao steps: " + json.dumps([s["training"] for s in steps]), flush=True)
    assert [s["outcome"] for s in steps] == ["committed"] * ROUNDS, steps
    first = steps[0]["training"]
    assert first["policy_steps"] == first["steps"] - 2, first  # warmup_steps: 2
    for step in steps:
        assert step["training"]["rollouts"] == ROLLOUTS, step
        assert abs(step["training"]["ratio_first"] - 1.0) < 1e-3, step


def assert_said_what_it_serves(loop: Loop) -> None:
    """A ``reef serve`` with no upstream says at start that the built-in tiny model serves
    and how to serve a provider or watch it learn."""
    stderr = loop.deployment.reef.managed.stderr_text()
    assert "no upstream is configured, so a local engine serves the built-in tiny model" in stderr
    assert "REEF_UPSTREAM_URL" in stderr and "reef demo" in stderr
