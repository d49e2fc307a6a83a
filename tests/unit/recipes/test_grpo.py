"""The grpo recipe: group-relative advantages from recorded tokens, clipped policy steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from recipes.base import Batch, Parent
from recipes.errors import RecipeConfigError, TrainingError
from recipes.grpo import GrpoRecipe, rollouts
from recipes.registry import build_recipe
from recipes.samples import Sample, Turn

GROUPED = {"batching": {"group_by": "prompt_id", "group_size": 2, "batch_size": 1}}


def tiny() -> tuple[Any, Any]:
    from reef.modelkit.tiny import build_model, build_tokenizer

    return build_model(), build_tokenizer()


def prompt_ids(tokenizer: Any, text: str) -> list[int]:
    from trainers.backends.torch_backend import prompt_ids as encode

    return encode(tokenizer, [{"role": "user", "content": text}])


@torch.no_grad()
def logprobs(model: Any, prompt: list[int], output: list[int]) -> list[float]:
    ids = torch.tensor([prompt + output])
    logits = model(input_ids=ids).logits[0, :-1]
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return [float(x) for x in chosen[len(prompt) - 1 :]]


def sample(
    name: str, score: float, prompt: list[int], output: list[int], lps: list[float] | None
) -> Sample:
    meta = (
        {
            "input_ids": prompt,
            "output_ids": output,
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, output, strict=True)],
        }
        if lps is not None
        else None
    )
    response: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    if meta is not None:
        response["meta_info"] = meta
    turn = Turn("r-" + name, "rel", "/v1/chat/completions", {"messages": []}, response)
    return Sample(name, "s", "rep-" + name, score, "", {"prompt_id": "p"}, (turn,), ("rel",))


def test_grpo_config_needs_groups() -> None:
    with pytest.raises(RecipeConfigError, match="group_by"):
        build_recipe("grpo")
    assert isinstance(build_recipe("grpo", GROUPED), GrpoRecipe)


def test_advantages_are_group_relative_and_flat_groups_are_skipped() -> None:
    good = sample("a", 1.0, [1, 2], [3, 4], [-1.0, -1.0])
    bad = sample("b", 0.0, [1, 2], [5, 6], [-1.0, -1.0])
    tie1 = sample("c", 0.5, [1, 2], [3], [-1.0])
    tie2 = sample("d", 0.5, [1, 2], [4], [-1.0])
    found = rollouts(Batch("s", ((good, bad), (tie1, tie2))))
    assert [r.advantage for r in found] == [1.0, -1.0]
    recipe = build_recipe("grpo", GROUPED)
    assert recipe.usable(good) is None
    assert recipe.usable(sample("e", 1.0, [1], [2], None)) == "no_token_data"
    with pytest.raises(TrainingError, match="score spread"):
        recipe.produce(Batch("s", ((tie1, tie2),)), Parent("r", "c", None), Path("/nonexistent"))


def test_a_step_raises_the_better_answer_and_lowers_the_worse(tmp_path: Path) -> None:
    model, tokenizer = tiny()
    prompt = prompt_ids(tokenizer, "Return exactly: cat")
    good_out = [int(t) for t in tokenizer("cat", add_special_tokens=False)["input_ids"]]
    bad_out = [int(t) for t in tokenizer("dog", add_special_tokens=False)["input_ids"]]
    before_good = sum(logprobs(model, prompt, good_out))
    before_bad = sum(logprobs(model, prompt, bad_out))
    batch = Batch(
        "s",
        (
            (
                sample("g", 1.0, prompt, good_out, logprobs(model, prompt, good_out)),
                sample("b", 0.0, prompt, bad_out, logprobs(model, prompt, bad_out)),
            ),
        ),
    )
    recipe = build_recipe("grpo", {**GROUPED, "training": {"steps": 3, "learning_rate": 3e-3}})
    candidate = recipe.produce(batch, Parent("r", "c", None), tmp_path / "candidate")
    assert candidate.metrics["ratio_first"] == pytest.approx(1.0, abs=1e-4)  # on-policy start
    from trainers.backends.torch_backend import load

    trained, _ = load(candidate.folder, "tiny")
    assert sum(logprobs(trained, prompt, good_out)) > before_good
    assert sum(logprobs(trained, prompt, bad_out)) < before_bad
