"""A bad recipe configuration stops ``reef trainer`` and ``reef serve`` at start, naming the key.

The real commands, with the recipe bound by ``REEF_RECIPE`` / ``REEF_RECIPE_CONFIG`` as a
deployment binds it: neither trains, serves or writes an event with a configuration it
cannot read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reef.testing.servers import free_port, run_reef

pytestmark = pytest.mark.slow

BAD_CONFIGS = [
    pytest.param(
        "recipe:\n  batching: {batch_size: 4, colour: red}\n",
        "recipe.batching.colour: Extra inputs are not permitted",
        id="unknown-key",
    ),
    pytest.param(
        "recipe:\n  batching: {batch_size: lots}\n",
        "recipe.batching.batch_size: Input should be a valid integer",
        id="wrong-type",
    ),
    pytest.param(
        "recipe:\n  training: {method: lora, lora: {rank: 8}}\n",
        "recipe.training.lora.rank: Extra inputs are not permitted",
        id="unknown-nested-key",
    ),
]


def _env(tmp_path: Path, body: str) -> dict[str, str]:
    config = tmp_path / "recipe.yaml"
    config.write_text(body)
    return {
        "REEF_TOKEN": "reef-config-token",
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(config),
    }


@pytest.mark.parametrize(("body", "message"), BAD_CONFIGS)
def test_reef_trainer_refuses_a_bad_recipe_config_naming_the_key(
    tmp_path: Path, body: str, message: str
) -> None:
    state = tmp_path / "state"
    done = run_reef("trainer", "--state-dir", str(state), env=_env(tmp_path, body), timeout=90)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert not (state / "log.sqlite3").exists()  # it stopped before opening the log


@pytest.mark.parametrize(("body", "message"), BAD_CONFIGS)
def test_reef_serve_refuses_a_bad_recipe_config_naming_the_key(
    tmp_path: Path, body: str, message: str
) -> None:
    state = tmp_path / "state"
    args = ("serve", "--state-dir", str(state), "--port", str(free_port()))
    done = run_reef(*args, env=_env(tmp_path, body), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr  # it exits: it never serves
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr  # one line, not a crash
    assert not (state / "log.sqlite3").exists()  # it stopped before opening the log
