"""``sft``: supervised fine-tuning on corrections and on well-scored answers.

Each admitted sample becomes one (conversation, target) example from its last turn:
the report's ``correction`` when it carries one (``feedback.correction`` or
``metadata.correction``: the answer that should have been given), else the recorded
answer when the score is at least ``training.imitate_min_score``. Anything else has no
training signal and is rejected (``no_training_signal``).

``training.method`` chooses what a candidate is:

* ``full`` (default): training starts from the parent release's full weights (the
  creation release: ``training.base_model``) and writes a Hugging Face folder the
  engine loads from disk.
* ``lora``: a PEFT LoRA adapter over ``training.base_model`` (:mod:`trainers.lora`).
  Every release is a *complete* adapter over that same base: a candidate continues
  training the parent release's adapter (the creation release starts a fresh one), so
  the engine serves ``base + adapter`` of the head alone. A parent that holds full
  weights cannot be continued (the engine applies an adapter to its own base model, not
  to a full-weight release's weights): that fails with a TrainingError.

Evaluation decodes greedily on the held-out ``evaluation`` tasks and grades each answer
(mean score); an adapter is evaluated merged onto the base, as the engine serves it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from recipes.base import (
    Batch,
    Candidate,
    Evaluation,
    Parent,
    Recipe,
    RecipeConfig,
    StrictModel,
)
from recipes.errors import EvaluationError, TrainingError
from recipes.samples import Sample
from recipes.tasks import TaskSet

#: the linear layers of a Llama-style decoder block (PEFT's module names)
LLAMA_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(StrictModel):
    """The adapter's shape (``training.method: lora``); PEFT's LoraConfig fields."""

    r: int = Field(default=16, ge=1, description="Rank of the update matrices.")
    alpha: int = Field(
        default=32, ge=1, description="Scaling numerator (lora_alpha); scale alpha/r."
    )
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: tuple[str, ...] = Field(
        default=LLAMA_LINEAR_MODULES,
        min_length=1,
        description="Names of the linear modules that get an adapter.",
    )


class SftTraining(StrictModel):
    backend: Literal["torch"] = Field(default="torch", description="Training backend.")
    method: Literal["full", "lora"] = Field(
        default="full", description="full: all weights; lora: a PEFT adapter over base_model."
    )
    lora: LoraSettings = Field(default_factory=LoraSettings, description="method lora: shape.")
    base_model: str = Field(
        default="tiny", description="Creation weights: built-in name or HF folder."
    )
    learning_rate: float = Field(default=3e-3, gt=0, description="AdamW learning rate.")
    steps: int = Field(default=30, ge=1, description="Optimizer steps per batch.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    imitate_min_score: float = Field(
        default=1.0, description="Samples scoring at least this imitate their own answer."
    )
    max_length: int = Field(default=512, ge=8, description="Longest example in tokens (then cut).")
    threads: int = Field(default=1, ge=1, description="torch CPU threads while training.")
    seed: int = Field(default=0, description="Seed of the training RNG.")

    @model_validator(mode="after")
    def _lora_needs_method(self) -> SftTraining:
        if "lora" in self.model_fields_set and self.method != "lora":
            raise ValueError("training.lora is set but training.method is not 'lora'")
        return self


class SftConfig(RecipeConfig):
    training: SftTraining = Field(default_factory=SftTraining)
    evaluation: TaskSet = Field(default_factory=TaskSet)

    @model_validator(mode="after")
    def _gate_needs_tasks(self) -> SftConfig:
        if self.gate.policy != "always" and not (
            self.evaluation.tasks or self.evaluation.tasks_file
        ):
            raise ValueError(
                f"gate.policy {self.gate.policy!r} needs evaluation.tasks or evaluation.tasks_file"
            )
        return self


class SftRecipe(Recipe[SftConfig]):
    name = "sft"
    config_model = SftConfig

    def usable(self, sample: Sample) -> str | None:
        return (
            None
            if example_of(sample, self.config.training.imitate_min_score)
            else ("no_training_signal")
        )

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        examples = [
            e
            for s in batch.samples
            if (e := example_of(s, self.config.training.imitate_min_score)) is not None
        ]
        if not examples:
            raise TrainingError("no sample of the batch carries a training signal")
        if self.config.training.method == "lora":
            from trainers.lora import train_sft_lora

            metrics = train_sft_lora(parent.folder, examples, out_dir, self.config.training)
        else:
            from trainers.torch_backend import train_sft

            metrics = train_sft(parent.folder, examples, out_dir, self.config.training)
        return Candidate(out_dir, metrics)

    def evaluate(self, folder: Path | None) -> Evaluation:
        return evaluate_tasks(
            folder,
            self.config.evaluation,
            base_model=self.config.training.base_model,
            threads=self.config.training.threads,
        )


def evaluate_tasks(
    folder: Path | None, task_set: TaskSet, *, base_model: str, threads: int
) -> Evaluation:
    """Greedy answers on the held-out tasks, graded; the mean is the score."""
    from trainers import torch_backend

    tasks = task_set.load()
    if not tasks:
        return Evaluation("none", 0.0)
    grade = task_set.grader_fn()
    outputs = torch_backend.generate_greedy(
        folder,
        [t.messages() for t in tasks],
        base_model=base_model,
        max_new_tokens=task_set.max_new_tokens,
        threads=threads,
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


def example_of(sample: Sample, imitate_min_score: float) -> tuple[list[dict[str, str]], str] | None:
    """(conversation, target) of the sample's last turn, or None without a signal."""
    turn = sample.last()
    if turn is None:
        return None
    messages = turn.messages()
    if not messages:
        return None
    correction = sample.correction()
    if correction is not None:
        return messages, correction
    answer = turn.answer()
    if answer and sample.score >= imitate_min_score:
        return messages, answer
    return None
