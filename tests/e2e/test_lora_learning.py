"""The loop learns with LoRA releases: serve → report → train an adapter → gate →
release → the engine serves ``base + adapter`` → serve better.

One ``reef serve`` on the embedded log (the local tiny engine, its sidecar following
``REEF_ENGINE_SCENARIO``, the ``sft`` trainer in-process) with ``training.method: lora``:
every candidate is a PEFT adapter folder over the built-in tiny model, continuing its
parent release's adapter. The task, grader, workload and the inverted-corrections check
are those of the full-weight sft test (tests/e2e/test_learning.py).

The tiny model's output layer is random and small (logits within about ±1.3), so
adapters on the decoder's projections alone cannot make it confident: ``lm_head`` is
among the target modules here. The adapter's settings (r 16, alpha 64, 60 steps at lr
2e-3) let it learn over as few releases as full weights do with 30 steps at 3e-3.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from reef.core import topics
from reef.core.events import EngineLoaded
from tests.support.api import unique_scenario
from tests.support.learning import learning_deployment
from tests.support.learning_loop import (
    TOKEN,
    TRAIN,
    TRAIN_BATCH,
    Loop,
    assert_worse_batch_rejected,
    engine_env,
    learn_until_target,
    write_recipe,
)
from tests.support.sidecar import events

pytestmark = pytest.mark.slow

MAX_ROUNDS = 7
BUDGET_S = 300.0
LORA_TRAINING = (
    "  training:\n"
    "    method: lora\n"
    "    steps: 60\n"
    "    learning_rate: 0.002\n"
    "    lora:\n"
    "      r: 16\n"
    "      alpha: 64\n"
    "      target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj,"
    " lm_head]\n"
)


@pytest.fixture
def lora_loop(tmp_path: Path) -> Iterator[Loop]:
    scenario = unique_scenario("lora")
    config = write_recipe(
        tmp_path,
        "  eligibility: {max_staleness: 2}\n"
        f"  batching: {{batch_size: {TRAIN_BATCH}}}\n" + LORA_TRAINING,
    )
    with learning_deployment(
        "embedded", tmp_path, engine_env(scenario, "sft", config), token=TOKEN, group="trainer:sft"
    ) as deployment:
        yield Loop(deployment, scenario)


def test_the_served_model_learns_through_lora_releases_and_the_gate_refuses_a_worse_one(
    lora_loop: Loop,
) -> None:
    loop = lora_loop
    assert "trainer" in loop.status(), "reef serve should run the sft trainer in-process"
    rng = random.Random(5)
    loop.ask_all(TRAIN[:1])  # creates the scenario (the creation release serves)

    def one_round(_: int) -> None:
        batch = rng.sample(TRAIN, TRAIN_BATCH)
        loop.report(loop.ask_all(batch), batch)

    history = learn_until_target(loop, "lora", one_round, MAX_ROUNDS, BUDGET_S)
    releases = list(dict.fromkeys(h for h, _ in history))

    # every committed release is an adapter, loaded by the engine as its default adapter
    trainer = loop.status()["trainer"]
    committed = [s for s in trainer["steps"] if s["outcome"] == "committed"]
    assert [s["release_id"] for s in committed] == releases[1 : len(committed) + 1], committed
    assert all(
        s["training"]["continued"] == (0.0 if i == 0 else 1.0) for i, s in enumerate(committed)
    )
    loads = {
        e.release_id: e.method
        for e in events(loop.deployment.state_dir, topics.ENGINE, loop.scenario)
        if isinstance(e, EngineLoaded)
    }
    assert all(loads.get(r) == "lora" for r in releases[1:]), loads

    def worse() -> None:  # corrections are the reversed words
        words = rng.sample(TRAIN, TRAIN_BATCH)
        loop.report(loop.ask_all(words), words, inverted=True)

    assert_worse_batch_rejected(loop, worse)
