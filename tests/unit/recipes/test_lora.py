"""LoRA training in the ``sft`` recipe: configuration, the adapter folder it writes (a
standard PEFT adapter, loadable by peft and by Reef's engine), a chain of adapters, and
evaluation of an adapter as the engine serves it. Real torch/peft on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from recipes.errors import RecipeConfigError, TrainingError
from recipes.registry import build_recipe
from recipes.sft import LLAMA_LINEAR_MODULES, LoraSettings, SftRecipe, SftTraining
from reef.engine.model import EngineModel
from reef.modelkit.tiny import build_model, build_tokenizer

WORDS = ["cat", "dog", "bird", "fish", "lamb", "mole", "newt", "owl"]
EXAMPLES = [([{"role": "user", "content": f"Return exactly: {w}"}], w) for w in WORDS]
TARGETS = (*LLAMA_LINEAR_MODULES, "lm_head")


def options(**lora: object) -> SftTraining:
    settings = LoraSettings.model_validate({"r": 4, "alpha": 8, "target_modules": TARGETS} | lora)
    return SftTraining(method="lora", lora=settings, learning_rate=5e-3, steps=3)


def train(parent: Path | None, out: Path, opts: SftTraining | None = None) -> dict[str, float]:
    from trainers.backends.lora import train_sft_lora

    return train_sft_lora(parent, EXAMPLES, out, opts or options())


def prompt_tensor() -> torch.Tensor:
    from trainers.backends.torch_backend import prompt_ids

    return torch.tensor([prompt_ids(build_tokenizer(), EXAMPLES[0][0])])


@torch.no_grad()
def logits(model: torch.nn.Module) -> torch.Tensor:
    out: torch.Tensor = model(input_ids=prompt_tensor()).logits
    return out


# -- configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("training", "key"),
    [
        ({"method": "adapter"}, "recipe.training.method"),
        ({"method": "lora", "lora": {"r": "eight"}}, "recipe.training.lora.r"),
        ({"method": "lora", "lora": {"r": 0}}, "recipe.training.lora.r"),
        ({"method": "lora", "lora": {"rank": 8}}, "recipe.training.lora.rank"),
        ({"method": "lora", "lora": {"alpha": "big"}}, "recipe.training.lora.alpha"),
        ({"method": "lora", "lora": {"dropout": 1.5}}, "recipe.training.lora.dropout"),
        ({"method": "lora", "lora": {"target_modules": []}}, "recipe.training.lora.target_modules"),
        ({"method": "lora", "lora": {"target_modules": "q_proj"}}, "recipe.training.lora"),
        ({"lora": {"r": 8}}, "recipe.training"),  # lora settings without method lora
    ],
)
def test_lora_config_errors_name_the_key(training: dict[str, object], key: str) -> None:
    with pytest.raises(RecipeConfigError, match=key.replace(".", r"\.")):
        build_recipe("sft", {"training": training})


def test_lora_config_defaults_and_dashed_keys(tmp_path: Path) -> None:
    from recipes.registry import recipe_from_settings
    from reef.settings import load_settings

    config = tmp_path / "deploy.yaml"
    config.write_text(
        "reef: {recipe: sft}\n"
        "recipe:\n"
        "  training:\n"
        "    method: lora\n"
        "    lora: {r: 8, alpha: 16, target-modules: [q_proj, v_proj]}\n"
    )
    settings = load_settings({}, config, environ={}).settings
    recipe = recipe_from_settings(settings, config)
    assert isinstance(recipe, SftRecipe)
    lora = recipe.config.training.lora
    assert recipe.config.training.method == "lora"
    assert (lora.r, lora.alpha, lora.dropout, lora.target_modules) == (
        8,
        16,
        0.0,
        ("q_proj", "v_proj"),
    )
    assert build_recipe("sft").config.training.method == "full"


# -- the adapter folder -------------------------------------------------------------


def test_the_candidate_is_a_small_peft_adapter_loadable_by_peft_and_the_engine(
    tmp_path: Path,
) -> None:
    from peft import PeftModel

    from trainers.backends.torch_backend import train_sft

    metrics = train(None, tmp_path / "adapter")
    folder = tmp_path / "adapter"
    assert sorted(p.name for p in folder.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8
    assert set(config["target_modules"]) == set(TARGETS)
    assert config["base_model_name_or_path"] == "tiny"
    assert metrics["continued"] == 0.0 and metrics["loss_last"] < metrics["loss_first"]

    # small next to the full weights a full-weight candidate writes
    train_sft(None, EXAMPLES, tmp_path / "full", SftTraining(steps=1))
    adapter_bytes = (folder / "adapter_model.safetensors").stat().st_size
    full_bytes = (tmp_path / "full" / "model.safetensors").stat().st_size
    assert adapter_bytes * 4 < full_bytes, (adapter_bytes, full_bytes)
    trainable = metrics["trainable_parameters"]
    assert 0 < trainable < 0.25 * sum(p.numel() for p in build_model().parameters())

    # peft loads it onto the base; the engine serves the same function
    base = logits(build_model())
    by_peft = logits(PeftModel.from_pretrained(build_model(), str(folder)).eval())
    assert not torch.allclose(by_peft, base, atol=1e-4)  # training changed the model
    engine = EngineModel(build_model(), build_tokenizer(), model_path="tiny", weight_version="0")
    engine.update_from_disk(str(folder), weight_version="r1")
    assert engine.weight_version == "r1"
    torch.testing.assert_close(logits(engine.snapshot().model), by_peft, atol=1e-4, rtol=1e-4)


def test_a_candidate_continues_its_parent_adapter(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    first = train(None, tmp_path / "r1")
    second = train(tmp_path / "r1", tmp_path / "r2")
    fresh_again = train(None, tmp_path / "fresh")
    assert second["continued"] == 1.0
    # it starts where the parent ended, not from a fresh adapter
    assert second["loss_first"] < first["loss_first"]
    assert second["loss_first"] == pytest.approx(first["loss_last"], rel=0.2)
    assert fresh_again["loss_first"] == pytest.approx(first["loss_first"])  # seeded
    r1 = load_file(tmp_path / "r1" / "adapter_model.safetensors")
    r2 = load_file(tmp_path / "r2" / "adapter_model.safetensors")
    assert r1.keys() == r2.keys()  # the same complete adapter, trained further
    assert any(not torch.equal(r1[k], r2[k]) for k in r1)


def test_a_parent_that_does_not_fit_the_chain_fails_clearly(tmp_path: Path) -> None:
    from trainers.backends.torch_backend import train_sft

    train(None, tmp_path / "r4")
    with pytest.raises(TrainingError, match=r"r 4 != 8"):
        train(tmp_path / "r4", tmp_path / "x", options(r=8))
    with pytest.raises(TrainingError, match=r"target_modules"):
        train(tmp_path / "r4", tmp_path / "y", options(target_modules=["q_proj"]))
    train_sft(None, EXAMPLES, tmp_path / "full", SftTraining(steps=1))
    with pytest.raises(TrainingError, match=r"full weights.*training\.method full"):
        train(tmp_path / "full", tmp_path / "z")
    # and full-weight training refuses an adapter parent
    with pytest.raises(TrainingError, match="LoRA adapter"):
        train_sft(tmp_path / "r4", EXAMPLES, tmp_path / "w", SftTraining(steps=1))


def test_the_recipe_produces_and_evaluates_an_adapter_as_the_engine_serves_it(
    tmp_path: Path,
) -> None:
    from recipes.base import Batch, Parent
    from recipes.samples import Sample, Turn
    from trainers.backends.torch_backend import generate_greedy

    tasks = [{"prompt": f"Return exactly: {w}", "answer": w} for w in WORDS]
    recipe = build_recipe(
        "sft",
        {
            "training": {
                "method": "lora",
                "steps": 20,
                "learning_rate": 0.01,
                "lora": {"r": 4, "alpha": 8, "target_modules": list(TARGETS)},
            },
            "evaluation": {"tasks": tasks, "max_new_tokens": 6},
        },
    )

    def sample(word: str) -> Sample:
        turn = Turn(
            f"r-{word}",
            "rel",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": f"Return exactly: {word}"}]},
            {"choices": [{"message": {"role": "assistant", "content": "x"}}]},
        )
        return Sample(f"s-{word}", "sc", "rep", 0.0, {"correction": word}, {}, (turn,), ("rel",))

    batch = Batch("sc", tuple((sample(w),) for w in WORDS))
    candidate = recipe.produce(batch, Parent("rel", "c0", None), tmp_path / "cand")
    assert (candidate.folder / "adapter_config.json").is_file()
    assert candidate.metrics["trainable_parameters"] > 0
    evaluation = recipe.evaluate(candidate.folder)
    assert evaluation == recipe.evaluate(candidate.folder)  # deterministic
    # what the evaluation decoded is what the engine's merged module decodes
    engine = EngineModel(build_model(), build_tokenizer(), model_path="tiny", weight_version="0")
    engine.update_from_disk(str(candidate.folder), weight_version="r1")
    conversations = [[{"role": "user", "content": t["prompt"]}] for t in tasks]
    served = _greedy(engine.snapshot().model, conversations, 6)
    evaluated = generate_greedy(
        candidate.folder, conversations, base_model="tiny", max_new_tokens=6
    )
    assert served == evaluated
    assert evaluated != generate_greedy(None, conversations, base_model="tiny", max_new_tokens=6)


def _greedy(model: torch.nn.Module, conversations: list[list[dict[str, str]]], n: int) -> list[str]:
    from trainers.backends.torch_backend import _greedy_batch, prompt_ids

    tokenizer = build_tokenizer()
    out = []
    for conversation in conversations:
        ids = prompt_ids(tokenizer, conversation)
        (tokens,) = _greedy_batch(model, [ids], int(tokenizer.eos_token_id), n)
        out.append(str(tokenizer.decode(tokens, skip_special_tokens=True)))
    return out


def test_the_lora_example_deployment_parses() -> None:
    from recipes.registry import recipe_from_settings
    from reef.settings import load_settings

    example = Path(__file__).resolve().parents[3] / "recipes/examples/sft-lora-local.yaml"
    settings = load_settings({}, example, environ={}).settings
    recipe = recipe_from_settings(settings, example)
    assert isinstance(recipe, SftRecipe)
    training = recipe.config.training
    assert training.method == "lora" and training.lora.target_modules == TARGETS
    assert len(recipe.config.evaluation.load()) == 40
