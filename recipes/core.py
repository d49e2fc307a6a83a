"""``core``: records only, never trains; a scenario keeps its creation release for ever."""

from __future__ import annotations

from pathlib import Path

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe, RecipeConfig
from recipes.errors import RecipeError


class CoreRecipe(Recipe[RecipeConfig]):
    name = "core"
    trains = False

    def usable(self, sample: object) -> str | None:
        return "record_only"

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        raise RecipeError("the core recipe records only and never trains")

    def evaluate(self, folder: Path | None) -> Evaluation:
        raise RecipeError("the core recipe records only and never evaluates")
