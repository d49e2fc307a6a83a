"""Training on a device: ``training.device`` / ``dtype`` /
``micro_batch_tokens`` / ``gradient_checkpointing`` / ``seed`` of ``sft`` and ``grpo``, on
the tiny model. There is no GPU here: the CUDA branches are the pure device resolution,
a GPU-less machine refusing ``cuda``, and a CUDA out-of-memory injected into a step."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from recipes.errors import (
    DeviceUnavailableError,
    EvaluationError,
    RecipeConfigError,
    TrainingError,
)
from recipes.registry import build_recipe
from recipes.training import LoraSettings, SftTraining, resolve_device
from reef.modelkit.tiny import build_model, build_tokenizer
from tests.support.trainer_harness import Harness, until
from trainers.backends.devices import Placement, compute_dtype, guarded, micro_batches
from trainers.backends.inprocess import InProcessBackend

WORDS = ["cat", "dog", "bird", "fish", "lamb", "mole", "newt", "owl", "pony", "yak"]
EXAMPLES = [([{"role": "user", "content": f"Return exactly: {w}"}], w) for w in WORDS]

# -- the device and dtype --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "gpus", "device"),
    [
        ("auto", 0, "cpu"),
        ("auto", 2, "cuda:0"),
        ("cpu", 2, "cpu"),
        ("cuda", 1, "cuda:0"),
        ("cuda:1", 2, "cuda:1"),
    ],
)
def test_the_device_resolves_against_the_gpus_present(spec: str, gpus: int, device: str) -> None:
    assert resolve_device(spec, gpus) == device


@pytest.mark.parametrize(
    ("spec", "gpus", "message"),
    [
        ("cuda", 0, "this machine has no CUDA device"),
        ("cuda:0", 0, "this machine has no CUDA device"),
        ("cuda:2", 2, "has 2 CUDA device(s), cuda:0 to cuda:1"),
    ],
)
def test_a_missing_gpu_is_a_configuration_error(spec: str, gpus: int, message: str) -> None:
    with pytest.raises(DeviceUnavailableError, match=rf"training\.device '{spec}'") as raised:
        resolve_device(spec, gpus)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_device_settings_are_validated_and_default_to_auto() -> None:
    training = build_recipe("sft").config.training
    assert (training.device, training.dtype, training.gradient_checkpointing) == (
        "auto",
        "auto",
        False,
    )
    assert training.micro_batch_tokens == 8192 and training.seed == 0
    for bad, key in [
        ({"device": "gpu"}, "recipe.training.device"),
        ({"device": "cuda:x"}, "recipe.training.device"),
        ({"dtype": "float16"}, "recipe.training.dtype"),
        ({"micro_batch_tokens": 0}, "recipe.training.micro_batch_tokens"),
    ]:
        with pytest.raises(RecipeConfigError, match=key.replace(".", r"\.")):
            build_recipe("sft", {"training": bad})
    grouped = {"batching": {"group_by": "p", "group_size": 2}}
    assert build_recipe("grpo", grouped).config.training.device == "auto"


def test_binding_a_recipe_checks_its_device_on_this_machine() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # the subprocess tests hide it instead
    with pytest.raises(DeviceUnavailableError, match="no CUDA device"):
        build_recipe("sft", {"training": {"device": "cuda"}})
    InProcessBackend().check_device("auto")
    assert build_recipe("sft", {"training": {"device": "cpu"}}).config.training.device == "cpu"


def test_the_compute_dtype_is_bf16_on_a_gpu_and_fp32_on_the_cpu() -> None:
    cpu, gpu = torch.device("cpu"), torch.device("cuda:0")
    assert compute_dtype("auto", cpu) == torch.float32
    assert compute_dtype("auto", gpu) == torch.bfloat16
    assert compute_dtype("bfloat16", cpu) == torch.bfloat16
    assert compute_dtype("float32", gpu) == torch.float32
    assert Placement.of("auto") == Placement(cpu, torch.float32)


def test_bf16_training_on_the_cpu_keeps_float32_weights(tmp_path: Path) -> None:
    from trainers.backends.torch_backend import load, train_sft

    options = SftTraining(device="cpu", dtype="bfloat16", steps=3)
    metrics = train_sft(None, EXAMPLES, tmp_path / "bf16", options)
    assert metrics["loss_last"] < metrics["loss_first"]
    model, _ = load(tmp_path / "bf16", "tiny")
    assert {p.dtype for p in model.parameters()} == {torch.float32}


# -- micro-batches by token budget -----------------------------------------------------


def test_micro_batches_keep_padded_tokens_within_the_budget() -> None:
    assert micro_batches([3, 3, 3, 3], 6) == [range(0, 2), range(2, 4)]
    assert micro_batches([2, 5, 2], 10) == [range(0, 2), range(2, 3)]
    assert micro_batches([12, 1], 10) == [range(0, 1), range(1, 2)]  # too long: alone
    assert micro_batches([4] * 5, 10**6) == [range(0, 5)]
    assert micro_batches([], 8) == []


def _gradients(rows: list[tuple[list[int], list[int]]], **settings: Any) -> list[torch.Tensor]:
    from trainers.backends.devices import enable_checkpointing
    from trainers.backends.torch_backend import accumulate_sft, sft_micro_batches

    options = SftTraining(**settings)
    model = build_model()
    model.train(True)
    if options.gradient_checkpointing:
        enable_checkpointing(model)
    chunks = sft_micro_batches(rows, options, pad=0)
    accumulate_sft(model, chunks, Placement.of("cpu"))
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _rows() -> list[tuple[list[int], list[int]]]:
    from trainers.backends.torch_backend import encode_example

    tokenizer = build_tokenizer()
    return [encode_example(tokenizer, m, t, 512) for m, t in EXAMPLES]


def test_micro_batching_by_tokens_gives_the_full_batch_gradient() -> None:
    rows = _rows()
    assert len({len(ids) for ids, _ in rows}) > 1  # padding differs between micro-batches
    full = _gradients(rows, micro_batch_tokens=10**6)
    split = _gradients(rows, micro_batch_tokens=60)
    assert len(micro_batches([len(ids) for ids, _ in rows], 60)) >= 4
    assert len(full) == len(split) > 0
    for whole, parts in zip(full, split, strict=True):
        torch.testing.assert_close(parts, whole, rtol=1e-4, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradient() -> None:
    rows = _rows()
    plain = _gradients(rows, micro_batch_tokens=120)
    checkpointed = _gradients(rows, micro_batch_tokens=120, gradient_checkpointing=True)
    for a, b in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


# -- seeds -----------------------------------------------------------------------------


def _digest(folder: Path) -> str:
    return hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(folder.glob("*.safetensors")))
    ).hexdigest()


def test_the_same_seed_gives_the_same_weights(tmp_path: Path) -> None:
    from trainers.backends.lora import train_sft_lora
    from trainers.backends.torch_backend import train_sft

    def lora(seed: int, name: str) -> str:
        settings = LoraSettings(r=4, alpha=8, dropout=0.1)
        options = SftTraining(method="lora", lora=settings, steps=2, seed=seed)
        train_sft_lora(None, EXAMPLES, tmp_path / name, options)
        return _digest(tmp_path / name)

    # LoRA's initialisation and dropout draw from the RNG: the seed decides them
    assert lora(3, "a") == lora(3, "b") != lora(4, "c")
    full = SftTraining(steps=2, micro_batch_tokens=100, gradient_checkpointing=True)
    train_sft(None, EXAMPLES, tmp_path / "d", full)
    train_sft(None, EXAMPLES, tmp_path / "e", full)
    assert _digest(tmp_path / "d") == _digest(tmp_path / "e")


# -- out of memory ---------------------------------------------------------------------


def _out_of_memory(*args: Any, **kwargs: Any) -> Any:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_out_of_memory_fails_the_candidate_or_the_evaluation() -> None:
    with pytest.raises(TrainingError, match=r"training ran out of device memory \(CUDA out"):
        guarded(_out_of_memory, TrainingError, "training")
    with pytest.raises(EvaluationError, match="evaluation ran out of device memory"):
        guarded(_out_of_memory, EvaluationError, "evaluation")
    assert guarded(lambda: 7, TrainingError, "training") == 7


async def test_a_cuda_out_of_memory_fails_that_candidate_and_the_trainer_goes_on(
    harness: Harness, running: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first candidate's training step runs out of memory: that candidate fails (the
    trainer's ``training_failed``, as for any failed candidate), nothing is proposed, the
    head keeps serving; the next batch trains and is released."""
    import trainers.backends.torch_backend as backend

    real = backend.accumulate_sft
    calls = {"n": 0}

    def step_once_out_of_memory(*args: Any, **kwargs: Any) -> float:
        calls["n"] += 1
        if calls["n"] == 1:
            _out_of_memory()
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "accumulate_sft", step_once_out_of_memory)
    r0 = await harness.create("s", recipe="sft")
    config = {
        "batching": {"batch_size": 2},
        "eligibility": {"max_staleness": 5},
        "training": {"steps": 1, "device": "cpu"},
        "gate": {"policy": "always"},
    }
    trainer = harness.trainer(config, recipe_name="sft")
    async with running(trainer):
        for _ in range(2):
            await harness.sample("s", r0)
        await until(lambda: trainer.status()["candidates"]["failed"] == 1, timeout=60)
        failed = trainer.status()["steps"][-1]
        for _ in range(2):
            await harness.sample("s", r0)
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1, timeout=60)
    assert failed["outcome"] == "training_failed", failed
    assert "TrainingError: training ran out of device memory" in failed["reason"], failed
    assert trainer.status()["error"] is None
    (release,) = await harness.committed()
    assert release.parent_release_id == r0


# -- a shared prompt computed once -----------------------------------------------------


def _agent_rows() -> list[tuple[list[int], list[int]]]:
    """Trajectories that start alike (an agent's system prompt and tools), then differ:
    a task of its own and a trained answer of varied length."""
    from trainers.backends.torch_backend import IGNORE

    generator = torch.Generator().manual_seed(5)
    shared = torch.randint(3, 60, (160,), generator=generator).tolist()
    rows = []
    for n in range(5):
        task = torch.randint(3, 60, (4 + n,), generator=generator).tolist()
        answer = torch.randint(3, 60, (6 + 3 * n,), generator=generator).tolist()
        ids = shared + task + answer
        rows.append((ids, [IGNORE] * (len(shared) + len(task)) + answer))
    return rows


def _sft_gradients(rows: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
    from trainers.backends.torch_backend import accumulate_sft, sft_micro_batches

    model = build_model()
    model.train(True)
    accumulate_sft(model, sft_micro_batches(rows, SftTraining(), pad=0), Placement.of("cpu"))
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_a_prompt_every_row_shares_is_computed_once_with_the_full_gradient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainers.backends import torch_backend as backend

    rows = _agent_rows()
    (chunk,) = backend.sft_micro_batches(rows, SftTraining(), pad=0)
    assert backend.shared_prefix(*chunk) == 160
    once = _sft_gradients(rows)
    monkeypatch.setattr(backend, "MIN_SHARED_PREFIX", 10**9)
    assert backend.shared_prefix(*chunk) == 0
    whole = _sft_gradients(rows)
    assert len(once) == len(whole) > 0
    for a, b in zip(once, whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_shared_prefix_ends_before_a_trained_token_and_leaves_each_row_a_token() -> None:
    from trainers.backends.torch_backend import IGNORE, MIN_SHARED_PREFIX, shared_prefix

    common = MIN_SHARED_PREFIX + 40
    ids = torch.tensor([[7] * common + [1, 2], [7] * common + [3, 0]])
    mask = torch.tensor([[1] * (common + 2), [1] * (common + 1) + [0]])
    untrained = torch.full_like(ids, IGNORE)
    assert shared_prefix(ids, untrained, mask) == common
    trained = untrained.clone()
    trained[1, MIN_SHARED_PREFIX + 5] = 7  # the second row trains a token inside the common part
    assert shared_prefix(ids, trained, mask) == MIN_SHARED_PREFIX + 5
    trained[0, MIN_SHARED_PREFIX - 1] = 7  # too short a prefix is not worth it: none
    assert shared_prefix(ids, trained, mask) == 0
    alike = torch.full((2, common), 7)
    untrained_alike = torch.full_like(alike, IGNORE)
    assert shared_prefix(alike, untrained_alike, torch.ones_like(alike)) == common - 1
    assert shared_prefix(ids[:1], untrained[:1], mask[:1]) == 0
