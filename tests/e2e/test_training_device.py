"""A training device the machine lacks stops ``reef trainer`` and ``reef serve`` at start:
one line naming ``training.device``, exit status 2, nothing written to the log.

The GPUs are hidden from the commands (``CUDA_VISIBLE_DEVICES=""``), so ``cuda`` is
missing on any machine this runs on. ``reef serve`` on the embedded log runs the trainer
in-process and checks the recipe before it serves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reef.testing.servers import free_port, run_reef

pytestmark = pytest.mark.slow

MESSAGE = "training.device 'cuda': this machine has no CUDA device (use cpu or auto)"


def _env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "recipe.yaml"
    config.write_text("recipe:\n  training: {device: cuda}\n  gate: {policy: always}\n")
    return {
        "REEF_TOKEN": "reef-device-token",
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(config),
        "CUDA_VISIBLE_DEVICES": "",
    }


def test_reef_trainer_refuses_a_missing_training_device(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = run_reef("trainer", "--state-dir", str(state), env=_env(tmp_path), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == f"reef trainer: {MESSAGE}", done.stderr
    assert not (state / "log.sqlite3").exists()


def test_reef_serve_refuses_a_missing_training_device(tmp_path: Path) -> None:
    state = tmp_path / "state"
    args = ("serve", "--state-dir", str(state), "--port", str(free_port()))
    done = run_reef(*args, env=_env(tmp_path), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == f"reef serve: {MESSAGE}", done.stderr
    assert not (state / "log.sqlite3").exists()
