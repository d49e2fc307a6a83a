"""The ``sao`` recipe's decisions (torch-free): one scored rollout per sample from the
engine's record, refusals, one rollout per prompt per step, the lambda rule, its
configuration and how the registry reaches it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Batch, Parent
from recipes.errors import MissingLogprobsError, RecipeConfigError, RolloutError
from recipes.registry import build_recipe, recipe_class, recipe_from_settings
from recipes.samples import Sample, Turn
from recipes.sao.recipe import SAORecipe
from recipes.sao.rollouts import distinct_prompt_steps, rollout_of
from recipes.sao.training import SaoTraining, ScoredRollout, Step, adaptive_lambda
from reef.settings import Settings


def turn(name: str, prompt: list[int], output: list[int], *, recorded: bool = True) -> Turn:
    response: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    if recorded:
        response["meta_info"] = {
            "input_ids": prompt,
            "output_ids": output,
            "output_token_logprobs": [[-0.1 * (i + 1), t, None] for i, t in enumerate(output)],
        }
    return Turn("r-" + name, "rel", "/v1/chat/completions", {"messages": []}, response)


def sample(name: str, *turns: Turn, score: float = 1.0) -> Sample:
    return Sample(name, "s", "rep-" + name, score, None, {}, turns, ("rel",))


def test_a_two_turn_trajectory_is_one_rollout_with_the_observation_masked() -> None:
    """Turn 2's prompt extends turn 1's prompt + answer by an observation (7, 8): those
    tokens get mask 0 and logprob 0; the generated ones keep the engine's logprobs."""
    first = turn("a", [1, 2], [3, 4])
    second = turn("b", [1, 2, 3, 4, 7, 8], [5])
    rollout = rollout_of(sample("s1", first, second, score=0.5), SaoTraining())
    assert rollout.token_ids == (1, 2, 3, 4, 7, 8, 5)
    assert rollout.action_mask == (0, 0, 1, 1, 0, 0, 1)
    assert rollout.logprobs == pytest.approx((0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.1))
    assert rollout.score == 0.5
    assert rollout.lam == pytest.approx(1 - 1 / (1.5 * 3))  # 3 generated tokens


def test_a_sample_without_engine_logprobs_is_refused() -> None:
    """No re-tokenising: a turn the engine did not record token for token never trains."""
    recipe = build_recipe("sao", {})
    bare = sample("s2", turn("a", [1, 2], [3], recorded=False))
    assert recipe.usable(bare) == "no_engine_logprobs"
    with pytest.raises(MissingLogprobsError, match="meta_info"):
        rollout_of(bare, SaoTraining())
    half = sample("s3", turn("a", [1, 2], [3]), turn("b", [1, 2, 3, 9], [4], recorded=False))
    assert recipe.usable(half) == "no_engine_logprobs"
    with pytest.raises(MissingLogprobsError):
        recipe.produce(Batch("s", ((bare,),)), Parent("rel", "c", None), Path("unused"))


def test_turns_that_do_not_chain_are_several_rollouts_and_are_refused() -> None:
    recipe = build_recipe("sao", {})
    apart = sample("s4", turn("a", [1, 2], [3]), turn("b", [1, 9, 9], [4]))
    assert recipe.usable(apart) == "not_one_rollout"
    assert recipe.usable(sample("s5", turn("a", [1, 2], [3]), score=float("nan"))) == (
        "score_not_finite"
    )
    assert recipe.usable(sample("s6", turn("a", [1, 2], [3]))) is None


def rollout(key: str) -> ScoredRollout:
    return ScoredRollout((1, 2), (0, 1), (0.0, -0.1), 1.0, key, 0.5)


@pytest.mark.parametrize(
    ("ids", "mask", "logprobs"),
    [((1, 2), (0, 1), (0.0,)), ((1, 2), (1, 1), (0.0, 0.0)), ((1, 2), (0, 0), (0.0, 0.0))],
    ids=["misaligned", "no-prompt", "nothing-generated"],
)
def test_a_malformed_rollout_cannot_be_built(
    ids: tuple[int, ...], mask: tuple[int, ...], logprobs: tuple[float, ...]
) -> None:
    with pytest.raises(RolloutError, match="aligned"):
        ScoredRollout(ids, mask, logprobs, 1.0, "k", 0.5)


def test_a_step_trains_at_most_one_rollout_per_prompt() -> None:
    a1, b1, a2, c1, a3 = (rollout(k) for k in "abaca")
    steps = distinct_prompt_steps([a1, b1, a2, c1, a3])
    assert [[r.prompt_key for r in step] for step in steps] == [["a", "b", "c"], ["a"], ["a"]]
    assert steps[0][0] is a1 and steps[1][0] is a2 and steps[2][0] is a3


def test_the_length_adaptive_lambda_and_a_fixed_one() -> None:
    assert adaptive_lambda(1, 1.5) == pytest.approx(1 / 3)
    assert adaptive_lambda(10, 1.5) == pytest.approx(1 - 1 / 15)
    assert adaptive_lambda(1, 0.5) == 0.0  # clamped
    assert adaptive_lambda(0, 1.5) == 0.0
    assert SaoTraining(lam=0.9).policy_lambda(1) == 0.9


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"batching": {"group_by": "prompt_id", "group_size": 4}}, "single rollouts"),
        ({"gate": {"policy": "win_margin"}}, "needs evaluation tasks"),
        ({"training": {"eps_low": 1.0}}, "recipe.training.eps_low"),
        ({"training": {"clip": 0.2}}, "recipe.training.clip: Extra inputs"),
    ],
)
def test_a_bad_sao_configuration_is_refused_at_start(section: dict[str, Any], message: str) -> None:
    with pytest.raises(RecipeConfigError, match=message):
        build_recipe("sao", section)


def test_sao_is_reachable_by_name_and_by_the_seed_dotted_path() -> None:
    assert recipe_class("sao") is SAORecipe
    assert recipe_class("recipes.sao.recipe:SAORecipe") is SAORecipe
    recipe = build_recipe("recipes.sao.recipe:SAORecipe", {})
    assert isinstance(recipe, SAORecipe) and recipe.config.gate.policy == "always"


class _NoSao:
    """A training backend without ``train_sao``."""

    def check_device(self, device: str) -> None:
        pass

    def train_sft(self, *args: Any) -> dict[str, float]:
        return {}

    def train_sft_lora(self, *args: Any) -> dict[str, float]:
        return {}

    def train_grpo(self, *args: Any) -> dict[str, float]:
        return {}

    def generate_greedy(self, *args: Any, **kwargs: Any) -> list[str]:
        return []


class _Recording(_NoSao):
    def __init__(self) -> None:
        self.steps: list[list[str]] = []

    def train_sao(
        self, parent: Path | None, steps: Sequence[Step], out_dir: Path, options: SaoTraining
    ) -> dict[str, float]:
        self.steps = [[r.prompt_key for r in step] for step in steps]
        return {"steps": float(len(steps))}


def test_a_backend_that_cannot_train_sao_is_refused_at_start() -> None:
    with pytest.raises(RecipeConfigError, match="no train_sao"):
        build_recipe("sao", {}, backend=_NoSao())


def test_produce_hands_the_backend_one_rollout_per_prompt_per_step() -> None:
    backend = _Recording()
    recipe = build_recipe("sao", {}, backend=backend)
    same = [sample(f"s{i}", turn(str(i), [1, 2], [3])) for i in range(2)]
    other = sample("s9", turn("9", [1, 5], [3]))
    batch = Batch("s", ((same[0],), (other,), (same[1],)))
    candidate = recipe.produce(batch, Parent("rel", "c", None), Path("out"))
    assert [len(step) for step in backend.steps] == [2, 1]
    assert len(set(backend.steps[0])) == 2
    assert candidate.metrics == {"steps": 2.0, "rollouts": 3.0}


def test_sao_says_at_start_when_the_deployment_records_no_token_data(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="reef.recipes.sao"):
        recipe_from_settings(Settings.of(recipe="sao", record_tokens=True))
        assert not caplog.records
        recipe_from_settings(Settings.of(recipe="sao"))
    assert "REEF_RECORD_TOKENS=true" in caplog.text
    assert "no_engine_logprobs" in caplog.text
