"""Real model folders: Llama, Qwen2 and Qwen3 folders built here
(random weights, a BPE tokenizer trained on the test's text, the family's chat template)
are served by the engine with their chat template, trained by sft (full and LoRA) on the
same token ids with the loss on the answer only, and by grpo on the token ids and
logprobs the engine served. A folder without a chat template, or whose tokenizer does not
fit its weights, is refused by the engine, ``reef engine`` and the trainer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from transformers import AutoTokenizer

from recipes.base import Batch, Parent
from recipes.errors import TrainingError
from recipes.registry import build_recipe
from recipes.samples import Sample, Turn
from recipes.training import LoraSettings, SftTraining
from reef.engine.config import EngineConfig
from reef.engine.errors import ModelFolderError
from reef.engine.loader import load_engine_model
from reef.engine.server import create_app
from tests.support.learning_loop import COPY, WORDS
from tests.support.model_folders import (
    ARCHITECTURES,
    build_folder,
    strip_chat_template,
    with_foreign_tokenizer,
)
from trainers.backends.torch_backend import IGNORE, encode_example, prompt_ids

TEXTS = [COPY.prompt(w) for w in WORDS[:300]] + WORDS[:300]
CONVERSATION = [
    {"role": "system", "content": "Answer with one word."},
    {"role": "user", "content": "Return exactly: bakope"},
    {"role": "assistant", "content": "bakope"},
    {"role": "user", "content": "Return exactly: tisu"},
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("model-folders")
    return {arch: build_folder(root / arch, arch, TEXTS) for arch in ARCHITECTURES}


@pytest.fixture(scope="module", params=ARCHITECTURES)
def served(request: pytest.FixtureRequest, folders: dict[str, Path]) -> Iterator[tuple[Path, Any]]:
    """(folder, a client of ``reef engine --model <folder>``'s app, in-process)."""
    folder = folders[request.param]
    with TestClient(create_app(EngineConfig(model=str(folder)))) as client:
        yield folder, client


def chat(client: Any, messages: list[dict[str, str]], **sampling: Any) -> dict[str, Any]:
    body = {"model": "m", "messages": messages, "max_tokens": 6, "logprobs": True, **sampling}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def test_the_engine_applies_the_folders_chat_template(served: tuple[Path, Any]) -> None:
    folder, client = served
    tokenizer = AutoTokenizer.from_pretrained(folder)
    meta = chat(client, CONVERSATION, temperature=0)["meta_info"]
    rendered = str(
        tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    )
    assert tokenizer.decode(meta["input_ids"]) == rendered
    assert rendered.count("Return exactly: tisu") == 1
    # the trainer's prompt is the engine's, token for token
    assert prompt_ids(tokenizer, CONVERSATION) == meta["input_ids"]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_loss_covers_the_answer_and_its_end_of_turn_only(
    folders: dict[str, Path], arch: str
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folders[arch])
    ids, labels = encode_example(tokenizer, CONVERSATION, "kofi", max_length=512)
    prompt = prompt_ids(tokenizer, CONVERSATION)
    answer = tokenizer("kofi", add_special_tokens=False)["input_ids"]
    assert ids == [*prompt, *answer, tokenizer.eos_token_id]
    assert labels == [IGNORE] * len(prompt) + ids[len(prompt) :]
    # the earlier assistant turn is context: no loss on it
    trained = [t for t, label in zip(ids, labels, strict=True) if label != IGNORE]
    assert tokenizer.decode(trained) == "kofi" + tokenizer.eos_token
    # what the template renders for the finished turn starts with exactly these ids
    finished: Any = tokenizer.apply_chat_template(
        [*CONVERSATION, {"role": "assistant", "content": "kofi"}], tokenize=True
    )
    finished = finished if isinstance(finished, list) else finished["input_ids"]
    assert finished[: len(ids)] == ids


def test_grpo_trains_on_the_token_ids_and_logprobs_as_served(
    served: tuple[Path, Any], tmp_path: Path
) -> None:
    """Four sampled answers, recorded as the engine returned them (``meta_info``: prompt
    and output ids, output logprobs), scored apart: the first policy step's importance
    ratio is 1, i.e. the trainer's logprobs of the served tokens are the engine's."""
    folder, client = served
    messages = [{"role": "user", "content": "Return exactly: bakope"}]
    replies = [chat(client, messages, temperature=1.0, seed=s) for s in range(4)]
    samples = [
        Sample(
            f"s{i}",
            "sc",
            f"rep{i}",
            float(i % 2),
            {},
            {"prompt_id": "p"},
            (Turn(f"r{i}", "rel", "/v1/chat/completions", {"messages": messages}, reply),),
            ("rel",),
        )
        for i, reply in enumerate(replies)
    ]
    recipe = build_recipe(
        "grpo",
        {
            "batching": {"group_by": "prompt_id", "group_size": 4, "batch_size": 1},
            "training": {"base_model": str(folder), "steps": 2, "learning_rate": 1e-3},
            "gate": {"policy": "always"},
        },
    )
    assert all(recipe.usable(s) is None for s in samples)
    candidate = recipe.produce(Batch("sc", (tuple(samples),)), Parent("r", "c", None), tmp_path)
    assert candidate.metrics["rollouts"] == 4
    assert candidate.metrics["ratio_first"] == pytest.approx(1.0, abs=1e-3)
    assert len({tuple(r["meta_info"]["output_ids"]) for r in replies}) > 1  # they differ
    assert (candidate.folder / "model.safetensors").is_file()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_lora_on_a_real_folder_is_served_as_the_gate_evaluated_it(
    folders: dict[str, Path], arch: str, tmp_path: Path
) -> None:
    from trainers.backends.lora import train_sft_lora
    from trainers.backends.torch_backend import generate_greedy

    base = str(folders[arch])
    examples = [([{"role": "user", "content": COPY.prompt(w)}], w) for w in WORDS[:16]]
    options = SftTraining(
        base_model=base,
        method="lora",
        lora=LoraSettings(r=4, alpha=16),
        steps=4,
        learning_rate=1e-2,
    )
    metrics = train_sft_lora(None, examples, tmp_path / "adapter", options)
    assert metrics["loss_last"] < metrics["loss_first"]
    conversations = [c for c, _ in examples[:4]]
    evaluated = generate_greedy(
        tmp_path / "adapter", conversations, base_model=base, max_new_tokens=5
    )
    engine = load_engine_model(base, device="cpu", weight_version="0")
    # as the sidecar loads an adapter release, named as SGLang's OpenAI server reads it
    engine.load_adapter("r1", str(tmp_path / "adapter"), weight_version="r1")
    with TestClient(create_app(EngineConfig(model=base), engine)) as client:
        replies = [
            chat(client, list(c), model="m:r1", temperature=0, max_tokens=5) for c in conversations
        ]
    assert [r["choices"][0]["message"]["content"] for r in replies] == evaluated
    assert {r["weight_version"] for r in replies} == {"r1"}


# -- what is refused ---------------------------------------------------------------------


def test_a_folder_without_a_chat_template_is_refused(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    from trainers.backends.torch_backend import train_sft

    bare = strip_chat_template(folders["qwen2"], tmp_path / "bare")
    with pytest.raises(ModelFolderError, match="has no chat template"):
        load_engine_model(str(bare), device="cpu", weight_version="0")
    with pytest.raises(TrainingError, match="has no chat template"):
        train_sft(
            None,
            [([{"role": "user", "content": "hi"}], "hi")],
            tmp_path / "out",
            SftTraining(base_model=str(bare), steps=1),
        )
    done = subprocess.run(
        [sys.executable, "-m", "reef.cli", "engine", "--model", str(bare), "--port", "9"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"reef engine: model folder '{bare}' has no chat template")
    ), done.stderr


def test_a_tokenizer_that_does_not_fit_the_weights_is_refused(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    from trainers.backends.torch_backend import train_sft

    larger = build_folder(tmp_path / "larger", "qwen2", TEXTS, vocab_size=600)
    mixed = with_foreign_tokenizer(folders["qwen2"], larger, tmp_path / "mixed")
    message = r"has \d+ tokens but the model's embeddings have 320 rows"
    with pytest.raises(ModelFolderError, match=message):
        load_engine_model(str(mixed), device="cpu", weight_version="0")
    with pytest.raises(TrainingError, match=message):
        train_sft(
            None,
            [([{"role": "user", "content": "hi"}], "hi")],
            tmp_path / "out",
            SftTraining(base_model=str(mixed), steps=1),
        )
