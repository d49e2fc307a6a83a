"""``training.backend: slime``: the files and command built from a Reef
batch (pure), the file read back by the rollout function with a TEST STAND-IN for slime's
``Sample``, and the missing-slime failure through the trainer. slime itself never ran here
(it needs GPUs, Megatron-LM and Ray)."""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from recipes.training import GrpoTraining, Rollout
from tests.support.trainer_harness import Harness, until
from trainers.backends.slime_job import ROLLOUT_FUNCTION, slime_job
from trainers.backends.slime_rollout import read_samples

SLIME = {
    "train_script": "/opt/slime/train.py",
    "python": "/opt/slime-env/bin/python",
    "megatron_checkpoint": "/ckpt/qwen3-0.6b_torch_dist",
    "gpus": 2,
    "megatron_args": ["--num-layers", "28", "--tensor-model-parallel-size", "1"],
}
ROLLOUTS = [
    Rollout([1, 2], [7, 8, 9], [-0.1, -0.2, -0.3], 1.0),
    Rollout([1, 2], [5], [-0.5], -1.0),
]


def options(**extra: Any) -> GrpoTraining:
    values = {"backend": "slime", "slime": SLIME, "base_model": "/models/qwen3-0.6b"}
    return GrpoTraining.model_validate({**values, "steps": 3, "learning_rate": 1e-6, **extra})


def test_the_command_runs_slimes_train_py_on_reefs_batch_without_rollout_engines(
    tmp_path: Path,
) -> None:
    job = slime_job(
        ROLLOUTS,
        options(),
        python="/opt/slime-env/bin/python",
        parent=None,
        out_dir=tmp_path / "cand",
        work_dir=tmp_path / "w",
    )
    config = tmp_path / "w" / "reef_slime_config.yaml"
    assert job.argv == [
        "/opt/slime-env/bin/python",
        "/opt/slime/train.py",
        *("--train-backend", "megatron", "--debug-train-only"),
        *("--actor-num-nodes", "1", "--actor-num-gpus-per-node", "2"),
        *("--hf-checkpoint", "/models/qwen3-0.6b"),
        *("--ref-load", "/ckpt/qwen3-0.6b_torch_dist"),
        *("--save", str(tmp_path / "cand" / "megatron"), "--save-interval", "3"),
        *("--save-hf", str(tmp_path / "cand")),
        *("--rollout-function-path", ROLLOUT_FUNCTION, "--custom-config-path", str(config)),
        "--disable-rollout-global-dataset",
        *("--num-rollout", "3", "--rollout-batch-size", "2"),
        *("--n-samples-per-prompt", "1", "--global-batch-size", "2"),
        *("--advantage-estimator", "grpo", "--disable-rewards-normalization"),
        *("--lr", "1e-06", "--eps-clip", "0.2", "--seed", "0"),
        *("--num-layers", "28", "--tensor-model-parallel-size", "1"),
    ]
    batch = tmp_path / "w" / "reef_rollouts.jsonl"
    assert json.loads(job.files[config]) == {"reef_rollouts_path": str(batch)}
    first, second = (json.loads(line) for line in job.files[batch].splitlines())
    assert first == {
        "group_index": 0,
        "index": 0,
        "tokens": [1, 2, 7, 8, 9],
        "response_length": 3,
        "reward": 1.0,
        "loss_mask": [1, 1, 1],
        "rollout_log_probs": [-0.1, -0.2, -0.3],
    }
    assert (second["tokens"], second["reward"], second["group_index"]) == ([1, 2, 5], -1.0, 1)


def test_a_candidate_trained_from_a_slime_release_continues_its_megatron_checkpoint(
    tmp_path: Path,
) -> None:
    parent = tmp_path / "releases" / "r1"
    job = slime_job(
        ROLLOUTS, options(), python="py", parent=parent, out_dir=tmp_path, work_dir=tmp_path
    )
    at = job.argv.index("--load")
    assert job.argv[at + 1] == str(parent / "megatron")


def test_the_slime_section_comes_exactly_with_the_slime_backend() -> None:
    with pytest.raises(ValidationError, match=r"training\.slime"):
        GrpoTraining.model_validate({"backend": "slime"})
    with pytest.raises(ValidationError, match=r"training\.slime"):
        GrpoTraining.model_validate({"slime": SLIME})
    assert GrpoTraining().backend == "torch"


@dataclass
class StandInSample:
    """TEST STAND-IN for ``slime.utils.types.Sample``: the fields Reef's file sets."""

    class Status(enum.Enum):
        COMPLETED = "completed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    tokens: list[int] = field(default_factory=list)
    response_length: int = 0
    reward: float | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    status: Status | None = None


def test_the_rollout_function_reads_the_batch_back_as_completed_one_sample_groups(
    tmp_path: Path,
) -> None:
    job = slime_job(
        ROLLOUTS, options(), python="py", parent=None, out_dir=tmp_path, work_dir=tmp_path
    )
    for path, text in job.files.items():
        path.write_text(text)
    groups = read_samples(tmp_path / "reef_rollouts.jsonl", StandInSample, rollout_id=4)
    assert [len(g) for g in groups] == [1, 1]
    first = groups[0][0]
    assert (first.tokens, first.response_length, first.reward) == ([1, 2, 7, 8, 9], 3, 1.0)
    assert (first.rollout_id, first.status) == (4, StandInSample.Status.COMPLETED)


def _failed(trainer: Any, count: int) -> Callable[[], bool]:
    return lambda: bool(trainer.status()["candidates"]["failed"] == count)


def _answer(output: list[int]) -> dict[str, Any]:
    return {
        "input_ids": [1, 2],
        "output_ids": output,
        "output_token_logprobs": [[-0.5, t, None] for t in output],
    }


async def test_without_slime_the_candidate_fails_with_one_line_and_the_trainer_goes_on(
    harness: Harness, running: Callable[..., Any]
) -> None:
    r0 = await harness.create("s", recipe="grpo")
    slime = {**SLIME, "python": sys.executable}
    config = {
        "batching": {"batch_size": 1, "group_by": "prompt_id", "group_size": 2},
        "training": {"backend": "slime", "slime": slime},
        "gate": {"policy": "always"},
    }
    trainer = harness.trainer(config, recipe_name="grpo")
    async with running(trainer):
        for batch in (1, 2):
            for score, output in ((1.0, [7]), (0.0, [8])):
                meta = {"prompt_id": f"p{batch}"}
                await harness.sample("s", r0, score=score, metadata=meta, meta_info=_answer(output))
            await until(_failed(trainer, batch), timeout=30)
    failed = trainer.status()["steps"][-1]
    assert failed["outcome"] == "training_failed", failed
    assert "not importable by " + sys.executable in failed["reason"], failed
    assert "THUDM/slime" in failed["reason"] and "\n" not in failed["reason"], failed
    assert trainer.status()["error"] is None
    assert await harness.committed() == []
