"""The trainer's candidate pipeline (trainers/candidates.py), with no log and no chain:
train, evaluate each folder once, let the recipe's gate decide, fail closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.base import Batch, Evaluation, Parent
from tests.support.fake_recipe import FakeConfig, FakeRecipe
from trainers.candidates import CandidatePipeline, EvaluationFailedError


class CountingRecipe(FakeRecipe):
    """The fake recipe, counting its evaluations."""

    def __init__(self, config: FakeConfig) -> None:
        super().__init__(config)
        self.evaluated: list[Path | None] = []

    def evaluate(self, folder: Path | None) -> Evaluation:
        self.evaluated.append(folder)
        return super().evaluate(folder)


BASE = Parent("release-0", "content-0", None)
EMPTY = Batch("s", ())


async def test_a_better_candidate_is_selected_and_each_folder_evaluated_once(
    tmp_path: Path,
) -> None:
    recipe = CountingRecipe(FakeConfig.model_validate({"step": 0.5}))
    pipeline = CandidatePipeline(recipe)
    candidate = await pipeline.train(EMPTY, BASE, tmp_path / "c1")
    gated = await pipeline.gate("c1", candidate.folder, BASE)
    again = await pipeline.gate("c1", candidate.folder, BASE)  # a retried batch
    assert gated.selected and again.selected
    assert (gated.candidate.score, gated.baseline.score) == (0.5, 0.0)
    assert recipe.evaluated == [candidate.folder, None]  # once each, then remembered
    verdict = gated.verdict()
    assert verdict["decision"]["selected"] is True
    assert verdict["candidate"]["score"] == 0.5 and verdict["baseline"]["score"] == 0.0


async def test_a_worse_candidate_is_not_selected(tmp_path: Path) -> None:
    config = {"step": -0.5, "gate": {"policy": "win_margin", "margin": 0.0}}
    pipeline = CandidatePipeline(FakeRecipe(FakeConfig.model_validate(config)))
    candidate = await pipeline.train(EMPTY, BASE, tmp_path / "c1")
    gated = await pipeline.gate("c1", candidate.folder, BASE)
    assert not gated.selected and gated.decision.reason


async def test_an_evaluation_that_raises_fails_closed(tmp_path: Path) -> None:
    recipe = FakeRecipe(FakeConfig.model_validate({"fail_evaluation": True}))
    pipeline = CandidatePipeline(recipe)
    candidate = await pipeline.train(EMPTY, BASE, tmp_path / "c1")
    with pytest.raises(EvaluationFailedError, match="EvaluationError: the evaluator is broken"):
        await pipeline.gate("c1", candidate.folder, BASE)
