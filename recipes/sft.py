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
* ``lora``: a PEFT LoRA adapter over ``training.base_model``.
  Every release is a *complete* adapter over that same base: a candidate continues
  training the parent release's adapter (the creation release starts a fresh one), so
  the engine serves ``base + adapter`` of the head alone. A parent that holds full
  weights cannot be continued (the engine applies an adapter to its own base model, not
  to a full-weight release's weights): that fails with a TrainingError.

Evaluation decodes greedily on the held-out ``evaluation`` tasks and grades each answer
(mean score, :func:`recipes.evaluation.evaluate_tasks`); an adapter is evaluated merged
onto the base, as the engine serves it. Training and decoding are the injected
:class:`recipes.training.TrainingBackend`'s (the recipe imports no training library).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe, RecipeConfig
from recipes.errors import TrainingError
from recipes.evaluation import evaluate_tasks
from recipes.samples import Sample
from recipes.tasks import TaskSet
from recipes.training import (
    LLAMA_LINEAR_MODULES,
    Example,
    LoraSettings,
    SftTraining,
    UsesBackend,
)

__all__ = [  # the training section's models live with the training port; import them here too
    "LLAMA_LINEAR_MODULES",
    "LoraSettings",
    "SftConfig",
    "SftRecipe",
    "SftTraining",
    "example_of",
]


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


class SftRecipe(UsesBackend, Recipe[SftConfig]):
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
        options = self.config.training
        if options.method == "lora":
            metrics = self.backend.train_sft_lora(parent.folder, examples, out_dir, options)
        else:
            metrics = self.backend.train_sft(parent.folder, examples, out_dir, options)
        return Candidate(out_dir, metrics)

    def evaluate(self, folder: Path | None) -> Evaluation:
        return evaluate_tasks(
            self.backend,
            folder,
            self.config.evaluation,
            base_model=self.config.training.base_model,
            threads=self.config.training.threads,
            device=self.config.training.device,
            dtype=self.config.training.dtype,
        )


def example_of(sample: Sample, imitate_min_score: float) -> Example | None:
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
