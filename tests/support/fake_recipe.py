"""A torch-free recipe for trainer tests: candidates are folders holding a score.

``produce`` writes ``score.txt`` = the parent's score + ``step`` (the built-in base
scores 0) and ``samples.json`` (the ids it trained on), after ``train_seconds`` of
"training"; ``evaluate`` reads the score back, or raises when ``fail_evaluation``.
Importable by dotted path (``tests.support.fake_recipe:FakeRecipe``) so a trainer in
another process can use it too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe, RecipeConfig
from recipes.errors import EvaluationError


class FakeConfig(RecipeConfig):
    step: float = 0.1
    fail_evaluation: bool = False
    train_seconds: float = 0.0


def read_score(folder: Path | None) -> float:
    if folder is None:
        return 0.0
    return float((folder / "score.txt").read_text())


class FakeRecipe(Recipe[FakeConfig]):
    name = "fake"
    config_model = FakeConfig

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        time.sleep(self.config.train_seconds)
        out_dir.mkdir(parents=True, exist_ok=True)
        score = read_score(parent.folder) + self.config.step
        (out_dir / "score.txt").write_text(f"{score:.6f}")
        (out_dir / "samples.json").write_text(json.dumps(batch.sample_ids))
        return Candidate(out_dir, {"examples": float(len(batch.samples))})

    def evaluate(self, folder: Path | None) -> Evaluation:
        if self.config.fail_evaluation:
            raise EvaluationError("the evaluator is broken (on purpose)")
        return Evaluation("fake", read_score(folder))
