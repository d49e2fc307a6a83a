"""Which weights answer a request, as SGLang selects a LoRA adapter (in process).

SGLang's ``OpenAIServingBase._resolve_lora_path``: ``model`` ``<base>:<adapter>`` before
the ``lora_path`` field; an adapter not loaded is refused (400). Reef's extension: a
named adapter equal to the routed release (``x-reef-serve-release``) that is not loaded
is answered by the default weights. And which releases the API names as adapters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reef.artifacts.manifest import Manifest, ManifestEntry
from reef.artifacts.parts import is_adapter_manifest
from reef.core.routing import SERVE_RELEASE_HEADER
from reef.engine.config import EngineConfig
from reef.engine.errors import AdapterError
from reef.engine.generation import Completion, Sampling
from reef.engine.loader import load_engine_model
from reef.engine.runtime import EngineRuntime, GenerationRequest
from reef.engine.server import create_app
from tests.support.engine import PROMPT, WeightSets


@pytest.fixture(scope="module")
def client(weight_sets: WeightSets) -> Iterator[TestClient]:
    model = load_engine_model("tiny", device="cpu", weight_version="base")
    model.load_adapter("ad", str(weight_sets.adapter), weight_version="ad-release")
    with TestClient(create_app(EngineConfig(model="tiny"), model)) as test_client:
        yield test_client


def ask(client: TestClient, headers: dict[str, str] | None = None, **fields: Any) -> Any:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": 8,
        "ignore_eos": True,
        "logprobs": True,
        **fields,
    }
    return client.post("/v1/chat/completions", json=body, headers=headers or {})


def served(response: Any) -> tuple[str, list[int]]:
    assert response.status_code == 200, response.text
    body = response.json()
    return body["weight_version"], body["meta_info"]["output_ids"]


def test_model_names_the_adapter_before_lora_path(client: TestClient) -> None:
    version, adapted = served(ask(client, lora_path="ad"))
    assert version == "ad-release"
    assert served(ask(client, model="tiny:ad", lora_path="other")) == (version, adapted)
    base_version, base = served(ask(client))
    assert base_version == "base" and base != adapted


def test_an_adapter_not_loaded_is_refused_unless_it_is_the_routed_release(
    client: TestClient,
) -> None:
    assert ask(client, model="tiny:gone").status_code == 400
    assert ask(client, lora_path="gone").status_code == 400
    routed = {SERVE_RELEASE_HEADER: "gone"}
    assert served(ask(client, routed, lora_path="gone")) == served(ask(client))
    assert served(ask(client, {SERVE_RELEASE_HEADER: "ad"})) == served(ask(client, lora_path="ad"))


def test_a_release_is_an_adapter_when_its_weights_have_an_adapter_config() -> None:
    entry = ManifestEntry("0" * 64, 1)
    assert is_adapter_manifest(Manifest({"adapter_config.json": entry}))
    assert not is_adapter_manifest(Manifest({"model.safetensors": entry}))
    assert is_adapter_manifest(
        Manifest({"reef-parts.json": entry, "weights/adapter_config.json": entry})
    )
    assert not is_adapter_manifest(
        Manifest({"reef-parts.json": entry, "harness/adapter_config.json": entry})
    )
    assert not is_adapter_manifest(Manifest())


def test_a_request_running_on_an_adapter_finishes_on_it_when_it_is_unloaded(
    weight_sets: WeightSets,
) -> None:
    model = load_engine_model("tiny", device="cpu", weight_version="base")
    model.load_adapter("ad", str(weight_sets.adapter), weight_version="ad-release")
    runtime = EngineRuntime(model, EngineConfig(model="tiny"))
    sampling = Sampling(max_new_tokens=300, temperature=0.0, ignore_eos=True)
    request = GenerationRequest(model.tokenizer.encode(PROMPT), sampling, adapter="ad")

    async def unloaded_midway() -> tuple[list[int], list[int], str, int]:
        version, whole = await runtime.complete(request)
        events = runtime.stream(request)
        streamed_version, _ = await anext(events)
        assert model.unload_adapter("ad") == {}  # the generation is under way
        items = [item async for _, item in events]
        completion = items[-1]
        assert isinstance(completion, Completion) and streamed_version == version
        return whole.output_ids, completion.output_ids, version, len(items)

    whole, streamed, version, after = asyncio.run(unloaded_midway())
    assert version == "ad-release"
    assert after > 1  # steps still came after the unload
    assert streamed == whole  # the adapter's answer, token for token
    with pytest.raises(AdapterError):
        asyncio.run(runtime.complete(request))  # a new request: the adapter is gone
