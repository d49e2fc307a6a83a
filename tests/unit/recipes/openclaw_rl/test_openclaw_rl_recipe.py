"""The ``openclaw_rl`` recipe's decisions (torch-free): which samples train, the judged
turn read from the engine's record, the hinted teacher prompt, its configuration and
how the registry reaches it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Batch, Parent
from recipes.errors import RecipeConfigError, RolloutError
from recipes.openclaw_rl.recipe import OpenClawRLRecipe
from recipes.openclaw_rl.training import JudgedTurn, OpenClawTraining
from recipes.openclaw_rl.turns import judged_turn
from recipes.registry import build_recipe, deployment_facts, recipe_class
from recipes.samples import Sample, Turn
from reef.settings import Settings
from trainers.backends.inprocess import InProcessBackend

JUDGED = {"source": "judge", "turn_id": "t", "votes": [1, 1]}


def turn(*, tokens: bool = True, top: int = 3) -> Turn:
    response: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    if tokens:
        response["meta_info"] = {
            "input_ids": [1, 2, 3],
            "output_ids": [4, 5],
            "output_token_logprobs": [[-0.5, 4, None], [-0.25, 5, None]],
        }
        if top:
            response["meta_info"]["output_top_logprobs"] = [
                [[-0.5 - i, 4 + i, None] for i in range(top)],
                [[-0.25 - i, 5 + i, None] for i in range(top)],
            ]
    request = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "First letter of: kato"},
        ]
    }
    return Turn("r1", "rel", "/v1/chat/completions", request, response)


def sample(
    score: float = -1.0, feedback: Any = None, metadata: dict[str, Any] | None = None, **kw: Any
) -> Sample:
    meta = JUDGED if metadata is None else metadata
    return Sample("s1", "s", "rep", score, feedback, meta, (turn(**kw),), ("rel",))


def test_a_judged_turn_carries_the_engine_record_and_the_raw_reward() -> None:
    found = judged_turn(sample(-1.0), OpenClawTraining())
    assert found == JudgedTurn((1, 2, 3), (4, 5), (-0.5, -0.25), (), -1.0, None)


def test_a_hint_gives_the_teacher_the_prompt_with_the_hint_and_the_recorded_top_k() -> None:
    found = judged_turn(
        sample(feedback=["Only the letter k.", "a longer hint here"]), OpenClawTraining()
    )
    assert found.top_ids == ((4, 5, 6), (5, 6, 7))
    assert found.teacher_messages == (
        ("system", "be brief"),
        ("user", "First letter of: kato\n\nHint: Only the letter k."),
    )
    no_distil = judged_turn(
        sample(feedback=["Only the letter k."]), OpenClawTraining(distill_coef=0)
    )
    assert no_distil.teacher_messages is None and no_distil.top_ids == ()


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (sample(metadata={}), "not_judged"),
        (sample(metadata={"source": "api"}), "not_judged"),
        (sample(score=0.5), "score_not_unit"),
        (sample(tokens=False), "no_engine_logprobs"),
        (sample(feedback=["Only the letter k."], top=0), "no_top_logprobs"),
        (sample(feedback=["Only the letter k."], top=1), "no_top_logprobs"),  # min_top_k 2
    ],
)
def test_samples_that_cannot_train_are_skipped_with_their_reason(bad: Sample, reason: str) -> None:
    recipe = build_recipe("openclaw_rl", {})
    assert recipe.usable(bad) == reason
    with pytest.raises(RolloutError):
        recipe.produce(Batch("s", ((bad,),)), Parent("rel", "c", None), Path("unused"))


def test_unhinted_turns_need_no_top_k_record() -> None:
    assert build_recipe("openclaw_rl", {}).usable(sample(top=0)) is None


def test_the_registry_reaches_it_and_its_config_is_strict(tmp_path: Path) -> None:
    assert recipe_class("openclaw_rl") is OpenClawRLRecipe
    with pytest.raises(RecipeConfigError, match="distill_coef"):
        build_recipe("openclaw_rl", {"training": {"distill_coef": -1}})
    with pytest.raises(RecipeConfigError, match="evaluation tasks"):
        build_recipe("openclaw_rl", {"gate": {"policy": "win_margin"}})
    with pytest.raises(RecipeConfigError, match="single judged turns"):
        build_recipe("openclaw_rl", {"batching": {"group_by": "x", "group_size": 2}})


def test_start_up_says_what_the_deployment_lacks(caplog: pytest.LogCaptureFixture) -> None:
    recipe = build_recipe("openclaw_rl", {})
    assert isinstance(recipe, OpenClawRLRecipe)
    with caplog.at_level(logging.WARNING, logger="reef.recipes.openclaw_rl"):
        recipe.bind_deployment(deployment_facts(Settings()))
    text = caplog.text
    assert "REEF_TRACK_SESSIONS" in text and "REEF_RECORD_TOKENS" in text
    assert "REEF_RECORD_TOP_LOGPROBS" in text
    caplog.clear()
    ready = Settings.of(track_sessions=True, judge_turns=True, record_top_logprobs=4)
    with caplog.at_level(logging.WARNING, logger="reef.recipes.openclaw_rl"):
        recipe.bind_deployment(deployment_facts(ready))
    assert caplog.text == ""


class OrderSeen(InProcessBackend):
    """The in-process backend, keeping the turns it was asked to train (no training)."""

    def __init__(self) -> None:
        self.orders: list[list[JudgedTurn]] = []

    def train_openclaw_rl(
        self,
        parent: Path | None,
        turns: Sequence[JudgedTurn],
        out_dir: Path,
        options: OpenClawTraining,
    ) -> dict[str, float]:
        self.orders.append(list(turns))
        return {}


def test_the_turns_train_in_an_order_fixed_by_their_content_not_their_arrival() -> None:
    backend = OrderSeen()
    recipe = build_recipe("openclaw_rl", {}, backend=backend)
    samples = [
        sample(score=float(s), feedback=[f"hint number {i}"])
        for i, s in enumerate([1, -1, 1, -1, -1])
    ]
    for arrival in (samples, samples[::-1], samples[2:] + samples[:2]):
        recipe.produce(Batch("s", tuple((x,) for x in arrival)), Parent("r", "c", None), Path("x"))
    first, *others = backend.orders
    assert all(order == first for order in others)
    assert len(first) == 5 and len({t.teacher_messages for t in first}) == 5
