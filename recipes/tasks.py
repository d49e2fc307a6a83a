"""Held-out evaluation tasks and programmatic graders.

A task is a prompt (optionally with a system prompt) and the expected answer. A grader
maps (output, answer) to a score in [0, 1]: ``exact`` gives 1.0 for an exact match
(case and surrounding space ignored) and otherwise half the fraction of matching
characters by position (partial credit, so a policy gradient sees a nearly right
answer as better than a wrong one); ``contains`` gives 1.0 when the answer occurs in the
output; a dotted ``pkg.mod:func`` names any ``func(output: str, answer: str) -> float``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from recipes.base import StrictModel
from recipes.errors import RecipeConfigError

Grader = Callable[[str, str], float]


class Task(StrictModel):
    prompt: str
    answer: str
    system: str | None = None

    def messages(self) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, {"role": "user", "content": self.prompt}]


class TaskSet(StrictModel):
    """``evaluation:`` of a recipe: the held-out tasks and how to grade them."""

    tasks: list[Task] = Field(default_factory=list, description="Tasks given inline.")
    tasks_file: Path | None = Field(
        default=None, description="JSON-lines file of {prompt, answer}."
    )
    grader: str = Field(default="exact", description="exact | contains | pkg.mod:func")
    limit: int | None = Field(default=None, ge=1, description="Use only the first N tasks.")
    max_new_tokens: int = Field(default=16, ge=1, le=4096, description="Decoding budget per task.")

    @field_validator("tasks_file")
    @classmethod
    def _relative_to_config(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base_dir") if info.context else None
        if value is not None and not value.is_absolute() and isinstance(base, Path):
            return base / value
        return value

    @field_validator("grader")
    @classmethod
    def _known_grader(cls, value: str) -> str:
        if value in GRADERS or ":" in value:
            return value
        raise ValueError(f"unknown grader {value!r} (exact, contains, pkg.mod:func)")

    def load(self) -> list[Task]:
        """Inline tasks, then the file's; RecipeConfigError if the file is unreadable."""
        found = list(self.tasks)
        if self.tasks_file is not None:
            found.extend(read_tasks(self.tasks_file))
        return found[: self.limit] if self.limit else found

    def grader_fn(self) -> Grader:
        if self.grader in GRADERS:
            return GRADERS[self.grader]
        from recipes.gates import load_callable

        return load_callable(self.grader)


def read_tasks(path: Path) -> list[Task]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise RecipeConfigError(f"recipe.evaluation.tasks_file: cannot read {path}: {exc}") from exc
    tasks = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            tasks.append(Task.model_validate(json.loads(line)))
        except ValueError as exc:
            raise RecipeConfigError(
                f"recipe.evaluation.tasks_file: {path}:{number}: not a task: {exc}"
            ) from exc
    return tasks


def _normal(text: str) -> str:
    return text.strip().lower()


def exact(output: str, answer: str) -> float:
    got, want = _normal(output), _normal(answer)
    if got == want:
        return 1.0
    matching = sum(1 for a, b in zip(got, want, strict=False) if a == b)
    return 0.5 * matching / max(len(got), len(want), 1)


def contains(output: str, answer: str) -> float:
    return 1.0 if _normal(answer) in _normal(output) else 0.0


GRADERS: dict[str, Grader] = {"exact": exact, "contains": contains}
