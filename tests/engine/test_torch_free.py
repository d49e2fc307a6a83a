"""Torch-free code paths of Reef never import torch, even when they import reef.engine."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
import reef.cli, reef.engine, reef.cli.engine, reef.engine.engine_client, reef.engine.protocol
import reef.engine.config, reef.engine.errors, reef.engine.sglang_launch
heavy = sorted(m for m in ("torch", "transformers", "peft", "safetensors") if m in sys.modules)
print(",".join(heavy))
"""


def test_cli_client_and_protocol_import_without_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""


def test_recipes_and_the_trainer_import_without_torch() -> None:
    check = (
        "import sys, recipes.registry, recipes.sft, recipes.core, recipes.composite.recipe, "
        "trainers.consumer, trainers.runner, reef.cli.trainer\n"
        "print(','.join(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""
