"""The in-process torch backend behind :class:`recipes.training.TrainingBackend`.

Importing this module loads no training library: each method imports
:mod:`trainers.backends.torch_backend` (:mod:`trainers.backends.lora` for LoRA,
:mod:`trainers.backends.sao` for ``sao``, :mod:`trainers.backends.openclaw_rl` for
``openclaw_rl``) when it is first called, so building a recipe
(``reef serve`` at start-up) stays torch-free: :meth:`InProcessBackend.check_device`
imports torch only for a ``cuda`` device.

GRPO with ``training.backend: slime`` runs slime's ``train.py`` instead
(:mod:`trainers.backends.slime_run`).

Running out of device memory while training or decoding fails that candidate or
evaluation (:func:`trainers.backends.devices.guarded`): the trainer records it and goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recipes.errors import EvaluationError, TrainingError

if TYPE_CHECKING:
    from recipes.openclaw_rl.training import JudgedTurn, OpenClawTraining
    from recipes.sao.training import SaoTraining, Step
    from recipes.training import Conversation, Example, GrpoTraining, Rollout, SftTraining


class InProcessBackend:
    """Trains and decodes in this process, on the CPU or a local GPU (blocking)."""

    def check_device(self, device: str) -> None:
        if device in ("auto", "cpu"):  # always there: no need to import torch
            return
        from recipes.training import resolve_device
        from trainers.backends.devices import cuda_count

        resolve_device(device, cuda_count())

    def train_sft(
        self, parent: Path | None, examples: Sequence[Example], out_dir: Path, options: SftTraining
    ) -> dict[str, float]:
        from trainers.backends.devices import guarded
        from trainers.backends.torch_backend import train_sft

        return guarded(
            lambda: train_sft(parent, examples, out_dir, options), TrainingError, "training"
        )

    def train_sft_lora(
        self, parent: Path | None, examples: Sequence[Example], out_dir: Path, options: SftTraining
    ) -> dict[str, float]:
        from trainers.backends.devices import guarded
        from trainers.backends.lora import train_sft_lora

        return guarded(
            lambda: train_sft_lora(parent, examples, out_dir, options), TrainingError, "training"
        )

    def train_grpo(
        self, parent: Path | None, rollouts: Sequence[Rollout], out_dir: Path, options: GrpoTraining
    ) -> dict[str, float]:
        if options.backend == "slime":  # a child process: slime's train.py on its GPUs
            from trainers.backends.slime_run import train_grpo_slime

            return train_grpo_slime(parent, rollouts, out_dir, options)
        from trainers.backends.devices import guarded
        from trainers.backends.torch_backend import train_grpo

        return guarded(
            lambda: train_grpo(parent, rollouts, out_dir, options), TrainingError, "training"
        )

    def train_sao(
        self, parent: Path | None, steps: Sequence[Step], out_dir: Path, options: SaoTraining
    ) -> dict[str, float]:
        from trainers.backends.devices import guarded
        from trainers.backends.sao import train_sao

        return guarded(
            lambda: train_sao(parent, steps, out_dir, options), TrainingError, "training"
        )

    def train_openclaw_rl(
        self,
        parent: Path | None,
        turns: Sequence[JudgedTurn],
        out_dir: Path,
        options: OpenClawTraining,
    ) -> dict[str, float]:
        from trainers.backends.devices import guarded
        from trainers.backends.openclaw_rl import train_openclaw_rl

        return guarded(
            lambda: train_openclaw_rl(parent, turns, out_dir, options), TrainingError, "training"
        )

    def generate_greedy(
        self,
        folder: Path | None,
        conversations: Sequence[Conversation],
        *,
        base_model: str,
        max_new_tokens: int,
        threads: int = 1,
        device: str = "cpu",
        dtype: str = "auto",
    ) -> list[str]:
        from trainers.backends.devices import guarded
        from trainers.backends.torch_backend import generate_greedy

        return guarded(
            lambda: generate_greedy(
                folder,
                conversations,
                base_model=base_model,
                max_new_tokens=max_new_tokens,
                threads=threads,
                device=device,
                dtype=dtype,
            ),
            EvaluationError,
            "evaluation",
        )
