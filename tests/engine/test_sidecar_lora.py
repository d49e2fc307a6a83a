"""Adapter releases through SGLang's LoRA protocol: real processes, the tiny model.

``reef serve`` (chain and API) forwards to a separate ``reef engine``, and ``reef
sidecar`` keeps that engine on the scenario's head. Two adapter releases and then the
base release are committed in turn:

* each adapter release is loaded with ``/load_lora_adapter`` under its release id
  (EngineLoaded ``method`` lora) while the engine's default weights stay the base;
* an exchange through Reef names it (SGLang's ``lora_path``) and is answered with the
  greedy ids of the adapter merged onto the base, computed here independently; asked
  directly the SGLang way (``model`` ``<base>:<adapter>``, or ``lora_path``) the engine
  answers the same, and a request naming no adapter gets the base's;
* the superseded adapter is unloaded (``/unload_lora_adapter``) once the next serves;
* the base release is loaded from disk, every adapter is unloaded, and Reef's exchanges
  get the base's ids again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.ids import EMPTY_CONTENT_ID
from reef.testing.servers import (
    ManagedProcess,
    clean_env,
    free_port,
    reef_executable,
    spawn,
    start_reef,
)
from tests.support.engine import PROMPT, WeightSets
from tests.support.sidecar import (
    MAX_TOKENS,
    TOKEN,
    Engine,
    chat_body,
    committed,
    create_scenario,
    loaded,
    propose,
    reef_client,
    release,
    start_engine_on,
    wait_engine_on,
    wait_until,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def adapters(weight_sets: WeightSets, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two PEFT adapters of the tiny model that answer differently."""
    import torch
    from peft import LoraConfig, get_peft_model

    from reef.modelkit import tiny

    config = LoraConfig(
        r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        second = tmp_path_factory.mktemp("adapter-2")
        get_peft_model(tiny.build_model(), config).save_pretrained(str(second))
    return [weight_sets.adapter, second]


def greedy_ids(adapter: Path | None) -> tuple[int, ...]:
    """The tiny base (with ``adapter`` merged) answering :data:`PROMPT`, greedy."""
    from reef.engine.generation import Decoder, Sampling
    from reef.engine.loader import context_window, eos_ids
    from reef.modelkit import tiny
    from reef.modelkit.adapters import merge_adapter

    tokenizer = tiny.build_tokenizer()
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    assert isinstance(encoded, list), encoded
    prompt = [int(token) for token in encoded]  # type: ignore[arg-type]
    base = tiny.build_model()
    model = base if adapter is None else merge_adapter(base, adapter)
    decoder = Decoder(model, eos_ids=eos_ids(model, tokenizer), context=context_window(model))
    sampling = Sampling(max_new_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    completion = decoder.generate(prompt, sampling, decode=lambda ids: "")
    return tuple(completion.output_ids)


def engine_chat(engine: Engine, **fields: Any) -> tuple[tuple[int, ...], str]:
    """(output ids, weight version) of a chat request sent straight to the engine."""
    body = {**chat_body(False), **fields}
    response = httpx.post(f"{engine.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    return tuple(answer["meta_info"]["output_ids"]), answer["weight_version"]


def held(engine: Engine) -> set[str]:
    """The adapters the engine lists (``/v1/models`` cards with a parent)."""
    cards = httpx.get(f"{engine.url}/v1/models", timeout=10).json()["data"]
    return {card["id"] for card in cards if card["parent"] is not None}


class Stack:
    """The three processes and what the test asks of them."""

    def __init__(self, tmp_path: Path) -> None:
        self.scenario = f"lora-{uuid.uuid4().hex[:10]}"
        logs = tmp_path / "logs"
        port = free_port()
        self.engine_id = f"engine-{port}"
        self.engine = start_engine_on(port, logs, "engine")
        self.reef = start_reef(
            ["--upstream-url", f"{self.engine.url}/v1", "--upstream-dialect", "openai"],
            env={"REEF_TOKEN": TOKEN},
            state_dir=tmp_path / "state",
            name="reef-lora",
        )
        self.state = self.reef.state_dir
        self.base = create_scenario(self.reef, self.scenario)
        argv = [
            reef_executable(),
            "sidecar",
            *("--engine", self.engine.url, "--scenario", self.scenario),
            *("--engine-id", self.engine_id, "--state-dir", str(self.state)),
        ]
        self.sidecar: ManagedProcess = spawn(argv, env=clean_env(), log_dir=logs, name="sidecar")

    def stop(self) -> None:
        for stop in (self.sidecar.stop, self.engine.managed.stop, self.reef.stop):
            stop()

    def serves(self, release_id: str) -> None:
        wait_engine_on(self.reef, self.scenario, self.engine_id, release_id)

    def through_reef(self) -> tuple[str, tuple[int, ...]]:
        """(x-reef-release-id, output ids) of one greedy exchange through Reef."""
        with reef_client(self.reef) as client:
            response = client.post(
                "/v1/chat/completions",
                json=chat_body(False),
                headers={"x-reef-scenario": self.scenario},
            )
        assert response.status_code == 200, response.text
        ids = tuple(response.json()["meta_info"]["output_ids"])
        return response.headers["x-reef-release-id"], ids


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    running = Stack(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_adapter_releases_load_serve_and_unload_by_sglang_protocol(
    stack: Stack, adapters: list[Path]
) -> None:
    base_ids = greedy_ids(None)
    expected = [greedy_ids(folder) for folder in adapters]
    assert len({base_ids, *expected}) == 3, "the weight sets must answer differently"
    stack.serves(stack.base)

    r1 = release(stack.state, stack.scenario, stack.base, adapters[0])
    stack.serves(r1)
    assert [event.method for event in loaded(stack.state, stack.scenario, r1)] == ["lora"]
    assert held(stack.engine) == {r1}
    assert stack.engine.info()["weight_version"] == stack.base  # the default is the base
    assert stack.through_reef() == (r1, expected[0])
    assert engine_chat(stack.engine, model=f"tiny:{r1}") == (expected[0], r1)
    assert engine_chat(stack.engine, lora_path=r1) == (expected[0], r1)
    assert engine_chat(stack.engine) == (base_ids, stack.base)

    r2 = release(stack.state, stack.scenario, r1, adapters[1])
    stack.serves(r2)
    wait_until(f"{r1} unloaded", lambda: held(stack.engine) == {r2}, timeout=30)
    assert stack.through_reef() == (r2, expected[1])
    missing = httpx.post(
        f"{stack.engine.url}/v1/chat/completions",
        json={**chat_body(False), "model": f"tiny:{r1}"},
        timeout=60,
    )
    assert missing.status_code == 400 and "not loaded" in missing.text

    r3 = committed(
        stack.state, stack.scenario, propose(stack.state, stack.scenario, r2, EMPTY_CONTENT_ID)
    )
    stack.serves(r3)
    assert [event.method for event in loaded(stack.state, stack.scenario, r3)] == ["disk"]
    wait_until(f"{r2} unloaded", lambda: held(stack.engine) == set(), timeout=30)
    assert stack.through_reef() == (r3, base_ids)
    assert stack.sidecar.running() and "Traceback" not in stack.sidecar.stderr_text()
