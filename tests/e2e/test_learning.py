"""The whole loop learns, measured through Reef's API: serve → report → train → gate →
release → hot reload → serve better.

The deployment: one ``reef serve`` on the embedded log with no upstream (the local tiny
engine, its sidecar following ``REEF_ENGINE_SCENARIO``) and the recipe's trainer
in-process (its progress in GET /reef/status). Whether a recipe learns does not depend on
the log, so these run on the embedded log only (one path per behaviour: on Kafka they
would be among the suite's slowest tests). The same loop on Kafka, with ``reef trainer`` and
``reef streams`` as their own processes (tests/support/learning.py), is proven by
tests/e2e/test_sao_learning.py (learning across releases), test_openclaw_rl.py (the judge's
path), test_trainer_crash.py (exactly once under SIGKILL) and
tests/integration/test_streams_scaleout.py (trainers splitting partitions).

The toy tasks are on pseudo-words of 3 to 6 letters, graded by :func:`recipes.tasks.exact`
(1.0 for the answer, else partial credit by position): "Return exactly: <word>" → the
word (sft), "First letter of: <word>" → its first letter (grpo). The mean score of the
*served* model on held-out prompts (greedy, through Reef's API) is measured after every
round.

* ``sft``: the grader reports every answer with its score and the correction (the word);
  the served score must rise from below 0.2 to above 0.7 across at least three committed
  releases. Then a deliberately worse batch (corrections are the reversed words) must be
  rejected by the gate, leaving the served outputs unchanged.
* ``grpo``: scores alone (no correction), grouped by prompt; the same two claims (see
  :func:`test_grpo_the_served_model_learns_from_scores_alone_and_the_gate_refuses_a_worse_one`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from tests.support.api import unique_scenario
from tests.support.learning import KafkaLearningLog, learning_deployment
from tests.support.learning_loop import (
    FIRST_LETTER,
    MAX_ROUNDS,
    MEASURE,
    TOKEN,
    TRAIN,
    TRAIN_BATCH,
    Answer,
    Loop,
    ToyTask,
    assert_worse_batch_rejected,
    engine_env,
    learn_until_target,
    write_recipe,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def log_kind() -> str:
    """The embedded log only (the module's docstring says why)."""
    return "embedded"


@pytest.fixture
def sft_loop(
    log_kind: str, learning_log: KafkaLearningLog | None, tmp_path: Path
) -> Iterator[Loop]:
    scenario = unique_scenario("learn")
    config = write_recipe(
        tmp_path,
        "  eligibility: {max_staleness: 2}\n"
        f"  batching: {{batch_size: {TRAIN_BATCH}}}\n"
        "  training: {steps: 30, learning_rate: 0.003}\n",
    )
    with learning_deployment(
        log_kind,
        tmp_path,
        engine_env(scenario, "sft", config),
        token=TOKEN,
        group="trainer:sft",
        kafka_log=learning_log,
    ) as deployment:
        yield Loop(deployment, scenario)


def test_the_served_model_learns_from_corrections_and_the_gate_refuses_a_worse_one(
    sft_loop: Loop,
) -> None:
    loop = sft_loop
    if loop.deployment.trainer is None:
        assert "trainer" in loop.status(), "reef serve should run the sft trainer in-process"
    rng = random.Random(5)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the creation release serves)

    def one_round(_: int) -> None:
        batch = rng.sample(TRAIN, TRAIN_BATCH)
        loop.report(loop.ask_all(batch), batch)

    learn_until_target(loop, "sft", one_round, MAX_ROUNDS)

    def worse() -> None:  # corrections are the reversed words
        words = rng.sample(TRAIN, TRAIN_BATCH)
        loop.report(loop.ask_all(words), words, inverted=True)

    assert_worse_batch_rejected(loop, worse)


# ---------------------------------------------------------------------------
# grpo: learning from scores alone

GROUP_SIZE = 8  # answers sampled per prompt (one group)
PROMPTS = 32  # groups per round (one batch)
TEMPERATURE = 1.0  # sample from the policy the engine records logprobs of
GRPO_MAX_ROUNDS = 14  # room for any seed of the round sampler, not only this one (see the test)


@pytest.fixture
def grpo_loop(
    log_kind: str,
    learning_log: KafkaLearningLog | None,
    tmp_path: Path,
    copy_warm_start_dir: Path,
) -> Iterator[Loop]:
    scenario = unique_scenario("grpo")
    config = write_recipe(
        tmp_path,
        "  eligibility: {max_staleness: 0}\n"
        f"  batching: {{group_by: prompt_id, group_size: {GROUP_SIZE}, batch_size: {PROMPTS}}}\n"
        "  training: {steps: 4, learning_rate: 0.0005, clip: 0.2}\n",
        FIRST_LETTER,
    )
    env = engine_env(scenario, "grpo", config)
    env["REEF_SEED_DIR"] = str(copy_warm_start_dir)
    with learning_deployment(
        log_kind, tmp_path, env, token=TOKEN, group="trainer:grpo", kafka_log=learning_log
    ) as deployment:
        yield Loop(deployment, scenario, FIRST_LETTER)


def test_grpo_the_served_model_learns_from_scores_alone_and_the_gate_refuses_a_worse_one(
    grpo_loop: Loop,
) -> None:
    """``grpo`` end to end, from scores alone (no correction), on "First letter of:
    <word>" from a warm start that copies words: every round the served model answers
    each of 32 training prompts 8 times at temperature 1 with ``"logprobs": true`` (the
    engine records token ids and logprobs; a seed per request makes the run repeatable);
    the grader reports each answer's score with ``metadata.prompt_id``; the trainer forms
    groups by prompt, computes group-relative advantages and takes clipped-ratio policy
    steps from the recorded tokens and logprobs; the gate (win_margin on 60 other
    held-out words, greedy) decides. The served model's greedy score on 60 held-out words
    must rise from below 0.2 to above 0.7 across at least 3 committed releases; then a
    batch reported with inverted scores is trained, rejected by the gate, and the served
    answers do not change.

    A seed per request makes a run repeat on either log, and GRPO_MAX_ROUNDS leaves room
    for other seeds of the round sampler, so the claim does not rest on one seed's draws;
    the inverted candidate must score below the head on the gate's words. On the copy
    task grpo stays slow (recipes/README.md)."""
    loop = grpo_loop
    rng = random.Random(7)
    loop.ask_all(MEASURE[:1])  # creates the scenario (the warm start serves)
    learn_until_target(
        loop, "grpo", lambda round_no: grpo_round(loop, rng, f"r{round_no}"), GRPO_MAX_ROUNDS
    )
    assert_trained_from_recorded_tokens(loop)
    assert_worse_batch_rejected(loop, lambda: grpo_round(loop, rng, "inverted", inverted=True))


def grpo_round(loop: Loop, rng: random.Random, tag: str, *, inverted: bool = False) -> None:
    """GROUP_SIZE sampled answers to each of PROMPTS training prompts, reported."""
    words = rng.sample(TRAIN, PROMPTS)
    asked = [w for w in words for _ in range(GROUP_SIZE)]
    seeds = [rng.randrange(2**31) for _ in asked]
    with loop.client() as client, ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(
                lambda pair: loop.ask(
                    client, pair[0], temperature=TEMPERATURE, logprobs=True, seed=pair[1]
                ),
                zip(asked, seeds, strict=True),
            )
        )
    reports = grpo_reports(loop.task, results, asked, tag, inverted=inverted)
    loop.post_reports(reports, concurrent=True)


def assert_trained_from_recorded_tokens(loop: Loop) -> None:
    """Every sample carried the engine's token data; on the embedded log (the trainer's
    step history in GET /reef/status) every batch trained on recorded tokens, on-policy
    (importance ratio 1 at the first step), and the gate decided by its rule."""
    trainer = loop.deployment.wait_trainer_status()
    assert trainer["samples_skipped"].get("no_token_data", 0) == 0, trainer
    assert trainer["error"] is None, trainer
    if "steps" not in trainer:
        return
    steps = [s for s in trainer["steps"] if "training" in s]
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
    assert steps, trainer
    for step in steps:
        assert step["training"]["rollouts"] > 0, step
        assert abs(step["training"]["ratio_first"] - 1.0) < 1e-3, step
        assert step["outcome"] in ("committed", "gate_rejected"), step
        wins = step["candidate_score"] > step["baseline_score"]  # a tie keeps the head
        assert wins == (step["outcome"] == "committed"), step


def grpo_reports(
    task: ToyTask, results: list[Answer], asked: list[str], tag: str, *, inverted: bool = False
) -> list[dict[str, Any]]:
    """Scores only (1 - score when inverted), grouped by ``metadata.prompt_id``."""
    bodies = []
    for (answer, receipt, _), word in zip(results, asked, strict=True):
        score = task.score(answer, word)
        bodies.append(
            {
                "score": 1.0 - score if inverted else score,
                "metadata": {"prompt_id": f"{tag}:{word}"},
                "references": [receipt],
            }
        )
    return bodies
