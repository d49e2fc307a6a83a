"""``sft``: supervised fine-tuning on corrections and on well-scored answers.

Each admitted sample becomes one example from its last turn: the report's
``correction`` when it carries one (``feedback.correction`` or ``metadata.correction``:
the answer that should have been given), else the recorded answer when the score is at
least ``training.imitate_min_score``. Anything else has no training signal and is
rejected (``no_training_signal``). A text exchange is (conversation, target); a
tool-using one is its whole trajectory, rendered by the model's chat template with the
tools offered, the loss on every token of the trained assistant turns (text and tool
calls), never on tool results or user text (:mod:`recipes.rendering`).

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

import json
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from recipes.base import Batch, Candidate, Evaluation, Parent, Recipe, RecipeConfig
from recipes.errors import TrainingError
from recipes.evaluation import evaluate_tasks
from recipes.rendering import TrainedTurns, Trajectory
from recipes.samples import Sample
from recipes.tasks import TaskSet
from recipes.training import (
    LLAMA_LINEAR_MODULES,
    Example,
    LoraSettings,
    SftTraining,
    UsesBackend,
)
from reef.core.dialogue.chat_template import template_messages

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
        return None if self.example(sample) is not None else "no_training_signal"

    def example(self, sample: Sample) -> Example | None:
        """What this recipe trains on for the sample (None: no training signal)."""
        training = self.config.training
        return example_of(sample, training.imitate_min_score, training.trained_turns)

    def produce(self, batch: Batch, parent: Parent, out_dir: Path) -> Candidate:
        examples = [e for s in batch.samples if (e := self.example(s)) is not None]
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


def example_of(
    sample: Sample, imitate_min_score: float, trained_turns: TrainedTurns = "last"
) -> Example | None:
    """What the sample's last turn teaches, or None without a signal: (conversation,
    target) for a text exchange; for a tool-using one (tools offered, or calls and
    results in it) the whole trajectory, rendered with its tools, the loss on the
    assistant turns the report is about: the last exchange's answer and the answers of
    the other exchanges it quoted, where the conversation repeats them
    (``trained_turns: all``: on every assistant turn)."""
    turn = sample.last()
    if turn is None:
        return None
    messages = turn.messages()
    if not messages:
        return None
    answer = template_messages(turn.answer_messages())
    correction = sample.correction()
    if correction is not None:
        target = [{"role": "assistant", "content": correction}]
    elif (
        answer
        and any(m.get("content") or m.get("tool_calls") for m in answer)
        and (sample.score is not None and sample.score >= imitate_min_score)
    ):
        target = answer
    else:
        return None
    tools = turn.tools()
    if not tools and not any(_uses_tools(m) for m in [*messages, *target]):
        text = correction if correction is not None else turn.answer()
        return (messages, text) if text else None
    quoted = {_said(m) for t in sample.turns[:-1] for m in template_messages(t.answer_messages())}
    reported = [
        i for i, m in enumerate(messages) if m["role"] == "assistant" and _said(m) in quoted
    ]
    return Trajectory.of([*messages, *target], tools, len(messages), trained_turns, reported)


def _uses_tools(message: dict[str, Any]) -> bool:
    return message.get("role") == "tool" or bool(message.get("tool_calls"))


def _said(message: dict[str, Any]) -> str:
    """What an assistant message said (its text and calls, call ids aside)."""
    calls = [
        (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])
    ]
    return json.dumps([message.get("content") or "", calls], sort_keys=True)
