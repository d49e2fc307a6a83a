"""What a slime GRPO run is made of: the command line and data files built from a Reef batch.

Pure (no I/O, no slime, no torch). :mod:`trainers.backends.slime_run` writes these files
and runs the command; :mod:`trainers.backends.slime_rollout` reads them inside slime.

Read from THUDM/slime at 624b824 (2026-08-21): ``train.py``, ``slime/utils/arguments.py``,
``slime/ray/rollout.py``, ``slime/rollout/base_types.py``, ``slime/utils/types.py``,
``docs/en/get_started/usage.md``. The choices, and why:

- **Reef's recorded samples come in through slime's rollout-function hook**
  (``--rollout-function-path``), not through slime's data buffer: the buffer
  (``--prompt-data``) holds *prompts* that slime's SGLang engines then answer, while Reef
  trains on answers already served and recorded token for token (ids, log-probabilities,
  group-relative advantages). The hook's samples need at least ``tokens``,
  ``response_length``, ``reward`` and ``status`` (arguments.py's help).
- **No SGLang engines in the run** (``--debug-train-only``: slime's own switch that skips
  starting rollout servers, ``rollout.py``): Reef serves and releases through its own
  flow, so slime only trains. Its weight sync to rollout engines is therefore unused.
- The rollout function runs in a Ray actor (another process), so the batch travels as a
  JSON-lines file named by ``reef_rollouts_path`` in ``--custom-config-path`` (a YAML file
  whose keys slime sets on ``args``; JSON is YAML).
- Reef's advantages are already group-relative; each recorded answer is its own slime
  group (``--n-samples-per-prompt 1``) whose reward is that advantage, and
  ``--disable-rewards-normalization`` keeps slime from re-normalising, so with
  ``--advantage-estimator grpo`` slime's advantage is Reef's.
- ``training.steps`` optimiser steps over the whole batch, as the torch backend takes:
  ``--num-rollout steps`` with the same samples each rollout and
  ``--global-batch-size`` = the batch.
- The candidate folder is slime's HF export (``--save-hf``, written by the Megatron actor
  in HF format, which the engine loads); the Megatron checkpoint goes to ``megatron/``
  inside it (``--save``) and the next candidate trained from this release continues from it
  (``--load``); the first one starts from ``training.slime.megatron_checkpoint``
  (``--ref-load``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.training import GrpoTraining, Rollout, SlimeSettings

#: the rollout function slime imports (``module.function``)
ROLLOUT_FUNCTION = "trainers.backends.slime_rollout.generate_rollout"
#: the key of the custom config that names the batch file
ROLLOUTS_KEY = "reef_rollouts_path"
#: the Megatron checkpoint inside a candidate folder trained by slime
MEGATRON_DIR = "megatron"


@dataclass(frozen=True, slots=True)
class SlimeJob:
    """Everything one run needs: the command and the files to write before it."""

    argv: list[str]
    #: path → text
    files: dict[Path, str]


def rollout_lines(rollouts: Sequence[Rollout]) -> str:
    """One JSON object per recorded answer, with the fields of slime's ``Sample``."""
    lines = (json.dumps(sample_fields(r, i), sort_keys=True) for i, r in enumerate(rollouts))
    return "".join(line + "\n" for line in lines)


def sample_fields(rollout: Rollout, index: int) -> dict[str, Any]:
    return {
        "group_index": index,
        "index": index,
        "tokens": [*rollout.prompt_ids, *rollout.output_ids],
        "response_length": len(rollout.output_ids),
        "reward": rollout.advantage,
        "loss_mask": [1] * len(rollout.output_ids),
        "rollout_log_probs": list(rollout.logprobs),
    }


def slime_argv(
    settings: SlimeSettings,
    options: GrpoTraining,
    *,
    python: str,
    count: int,
    parent: Path | None,
    out_dir: Path,
    config_path: Path,
) -> list[str]:
    """``python train.py …`` for ``count`` recorded answers (the flags are slime's)."""
    load = ["--load", str(parent / MEGATRON_DIR)] if parent is not None else []
    return [
        python,
        settings.train_script,
        *("--train-backend", "megatron", "--debug-train-only"),
        *("--actor-num-nodes", "1", "--actor-num-gpus-per-node", str(settings.gpus)),
        *("--hf-checkpoint", options.base_model, "--ref-load", settings.megatron_checkpoint),
        *load,
        *("--save", str(out_dir / MEGATRON_DIR), "--save-interval", str(options.steps)),
        *("--save-hf", str(out_dir)),
        *("--rollout-function-path", ROLLOUT_FUNCTION, "--custom-config-path", str(config_path)),
        "--disable-rollout-global-dataset",
        *("--num-rollout", str(options.steps), "--rollout-batch-size", str(count)),
        *("--n-samples-per-prompt", "1", "--global-batch-size", str(count)),
        *("--advantage-estimator", "grpo", "--disable-rewards-normalization"),
        *("--lr", repr(options.learning_rate), "--eps-clip", repr(options.clip)),
        *("--seed", str(options.seed)),
        *settings.megatron_args,
    ]


def slime_job(
    rollouts: Sequence[Rollout],
    options: GrpoTraining,
    *,
    python: str,
    parent: Path | None,
    out_dir: Path,
    work_dir: Path,
) -> SlimeJob:
    """The run for ``rollouts``; its files go to ``work_dir``, the candidate to ``out_dir``."""
    if options.slime is None:
        raise ValueError("training.backend is not slime")
    batch_path = work_dir / "reef_rollouts.jsonl"
    config_path = work_dir / "reef_slime_config.yaml"
    argv = slime_argv(
        options.slime,
        options,
        python=python,
        count=len(rollouts),
        parent=parent,
        out_dir=out_dir,
        config_path=config_path,
    )
    files = {
        batch_path: rollout_lines(rollouts),
        config_path: json.dumps({ROLLOUTS_KEY: str(batch_path)}) + "\n",
    }
    return SlimeJob(argv, files)
