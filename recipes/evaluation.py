"""Greedy evaluation on held-out tasks, shared by the recipes that train weights.

The decoding is the backend's (:meth:`recipes.training.TrainingBackend.generate_greedy`);
the grading and the score are decided here.
"""

from __future__ import annotations

from pathlib import Path

from recipes.base import RecipeConfig
from recipes.errors import EvaluationError
from recipes.gates import Evaluation
from recipes.tasks import TaskSet
from recipes.training import TrainingBackend


def evaluate_tasks(
    backend: TrainingBackend,
    folder: Path | None,
    task_set: TaskSet,
    *,
    base_model: str,
    threads: int,
    device: str = "cpu",
    dtype: str = "auto",
) -> Evaluation:
    """Greedy answers on the held-out tasks (decoded on ``device``), graded; the mean is
    the score."""
    tasks = task_set.load()
    if not tasks:
        return Evaluation("none", 0.0)
    grade = task_set.grader_fn()
    outputs = backend.generate_greedy(
        folder,
        [t.messages() for t in tasks],
        base_model=base_model,
        max_new_tokens=task_set.max_new_tokens,
        threads=threads,
        device=device,
        dtype=dtype,
    )
    try:
        scores = [float(grade(out, t.answer)) for out, t in zip(outputs, tasks, strict=True)]
    except Exception as exc:  # a grader's bug must fail the evaluation (closed)
        raise EvaluationError(f"grader failed: {type(exc).__name__}: {exc}") from exc
    mean = sum(scores) / len(scores)
    exact = sum(1 for s in scores if s >= 1.0) / len(scores)
    details = [
        {"prompt": t.prompt, "answer": t.answer, "output": out, "score": s}
        for t, out, s in zip(tasks[:5], outputs, scores, strict=False)
    ]
    return Evaluation(
        f"greedy:{task_set.grader}",
        mean,
        {"mean_score": mean, "exact_rate": exact, "tasks": float(len(tasks))},
        details,
    )


def check_scored_alone(config: RecipeConfig, evaluation: TaskSet, trains: str) -> None:
    """The configuration rules of a recipe whose every sample is scored alone (``sao``,
    ``openclaw_rl``; ``trains`` says what it trains, for the message): no groups, and a
    gate other than ``always`` has held-out tasks to score the candidates on. Raises
    ValueError, as a pydantic validator does."""
    if config.batching.group_by is not None or config.batching.group_size != 1:
        raise ValueError(f"{trains}: leave batching.group_by and group_size")
    if config.gate.policy != "always" and not (evaluation.tasks or evaluation.tasks_file):
        raise ValueError(f"gate.policy {config.gate.policy!r} needs evaluation tasks")
