"""The engine as a real process on loopback: every endpoint's fields, SGLang's shapes.

Two engines per module: ``engine`` is never updated (field and determinism checks),
``mutable`` takes weight updates, adapters and a gloo broadcast.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
import torch  # noqa: F401  (installed by the bootstrap: a missing torch fails here)

from reef.engine.engine_client import EngineClient
from reef.engine.errors import EngineUnavailableError
from reef.testing.servers import dead_url
from tests.support.engine import (
    PROMPT,
    EngineProcess,
    WeightSets,
    greedy,
    running_engine,
)

MODEL_INFO_KEYS = {
    "model_path",
    "is_generation",
    "tokenizer_path",
    "preferred_sampling_params",
    "weight_version",
    "has_image_understanding",
    "has_audio_understanding",
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    with running_engine(tmp_path_factory.mktemp("engine-logs"), "--weight-version", "v0") as e:
        yield e


@pytest.fixture(scope="module")
def start_folder(tmp_path_factory: pytest.TempPathFactory, weight_sets: WeightSets) -> Path:
    """A private copy of weight set A that ``mutable`` starts from (``--model <dir>``)."""
    folder = tmp_path_factory.mktemp("start") / "model"
    shutil.copytree(weight_sets.seed_a, folder)
    return folder


@pytest.fixture(scope="module")
def mutable(
    tmp_path_factory: pytest.TempPathFactory, start_folder: Path
) -> Iterator[EngineProcess]:
    logs = tmp_path_factory.mktemp("mutable-logs")
    with running_engine(logs, "--model", str(start_folder), "--served-model-name", "m") as e:
        yield e


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as client:
        yield client


@pytest.fixture
def sdk(engine: EngineProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{engine.url}/v1", api_key="unused", max_retries=0)


# -- health, info, cache ------------------------------------------------------------


def test_health_endpoints_answer_200(engine: EngineProcess, http: httpx.Client) -> None:
    assert http.get(f"{engine.url}/health").status_code == 200
    assert http.get(f"{engine.url}/health_generate").status_code == 200


def test_model_info_has_exactly_sglangs_keys(engine: EngineProcess, http: httpx.Client) -> None:
    info = http.get(f"{engine.url}/get_model_info").json()
    assert set(info) == MODEL_INFO_KEYS
    assert info["model_path"] == "tiny"
    assert info["is_generation"] is True
    assert info["weight_version"] == "v0"
    assert info["has_image_understanding"] is False


def test_flush_cache_answers_like_sglang(engine: EngineProcess, http: httpx.Client) -> None:
    response = http.post(f"{engine.url}/flush_cache")
    assert response.status_code == 200
    assert response.text.startswith("Cache flushed.")


def test_models_lists_the_served_model(sdk: openai.OpenAI) -> None:
    assert [model.id for model in sdk.models.list()] == ["tiny"]


# -- /generate ------------------------------------------------------------------------


def test_generate_returns_text_ids_and_meta_info(engine: EngineProcess, http: httpx.Client) -> None:
    body = greedy(http, engine.url, max_new_tokens=12, rid="r-1")
    meta = body["meta_info"]
    assert isinstance(body["text"], str)
    assert len(body["output_ids"]) == meta["completion_tokens"] <= 12
    assert meta["id"] == "r-1"
    assert meta["prompt_tokens"] == len(PROMPT)
    assert meta["weight_version"] == "v0"
    assert meta["finish_reason"]["type"] in {"length", "stop"}
    assert "output_token_logprobs" not in meta


def test_generate_greedy_is_deterministic(engine: EngineProcess, http: httpx.Client) -> None:
    first = greedy(http, engine.url, max_new_tokens=24)
    second = greedy(http, engine.url, max_new_tokens=24)
    assert first["output_ids"] == second["output_ids"]


def test_generate_logprobs_are_per_output_token(engine: EngineProcess, http: httpx.Client) -> None:
    body = greedy(http, engine.url, max_new_tokens=8, return_logprob=True, top_logprobs_num=3)
    meta = body["meta_info"]
    logprobs = meta["output_token_logprobs"]
    assert [entry[1] for entry in logprobs] == body["output_ids"]
    for logprob, token_id, text in logprobs:
        assert isinstance(logprob, float) and logprob <= 0.0
        assert isinstance(token_id, int) and text is None
    # greedy: each chosen token is the most likely one
    assert [top[0][1] for top in meta["output_top_logprobs"]] == body["output_ids"]
    assert meta["input_token_logprobs"][0][0] is None
    assert len(meta["input_token_logprobs"]) == meta["prompt_tokens"]


def test_generate_from_input_ids_matches_text(engine: EngineProcess, http: httpx.Client) -> None:
    from reef.modelkit.tiny import build_tokenizer

    by_text = greedy(http, engine.url, max_new_tokens=8)
    ids = build_tokenizer().encode(PROMPT)
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    by_ids = http.post(f"{engine.url}/generate", json=body).json()
    assert by_ids["output_ids"] == by_text["output_ids"]


def test_generate_stream_is_sse_ending_in_done(engine: EngineProcess, http: httpx.Client) -> None:
    import json

    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    buffered = http.post(f"{engine.url}/generate", json=body).json()
    with http.stream("POST", f"{engine.url}/generate", json={**body, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-weight-version"] == "v0"
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[-1]["text"] == buffered["text"]
    assert chunks[-1]["meta_info"]["finish_reason"] == buffered["meta_info"]["finish_reason"]
    assert all(chunk["meta_info"]["finish_reason"] is None for chunk in chunks[:-1])


def test_generate_rejects_an_unknown_adapter(engine: EngineProcess, http: httpx.Client) -> None:
    body = {"text": "hi", "lora_path": "nope", "sampling_params": {"max_new_tokens": 2}}
    response = http.post(f"{engine.url}/generate", json=body)
    assert response.status_code == 400
    assert "not loaded" in response.json()["error"]["message"]


def test_generate_stop_string_ends_and_is_trimmed(
    engine: EngineProcess, http: httpx.Client
) -> None:
    text = greedy(http, engine.url, max_new_tokens=24)["text"]
    stop = text[3:5]
    body = greedy(
        http,
        engine.url,
        max_new_tokens=24,
        sampling_params={
            "max_new_tokens": 24,
            "temperature": 0,
            "stop": [stop],
        },
    )
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert body["text"] == text[: text.index(stop)]


# -- OpenAI chat completions ----------------------------------------------------------


def _chat(
    sdk: openai.OpenAI,
    *,
    logprobs: bool | openai.Omit = openai.omit,
    top_logprobs: int | openai.Omit = openai.omit,
    n: int | openai.Omit = openai.omit,
) -> openai.types.chat.ChatCompletion:
    return sdk.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Return exactly: hello"}],
        temperature=0,
        max_tokens=10,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        n=n,
    )


def _extra(model: pydantic.BaseModel) -> dict[str, Any]:
    """The fields the engine adds beyond OpenAI's schema (``weight_version``, ``meta_info``)."""
    assert model.model_extra is not None
    return model.model_extra


def test_chat_completion_buffered(sdk: openai.OpenAI) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model="tiny",
        messages=[{"role": "user", "content": "Return exactly: hello"}],
        temperature=0,
        max_tokens=10,
    )
    assert raw.headers["x-weight-version"] == "v0"
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert isinstance(completion.choices[0].message.content, str)
    assert completion.choices[0].finish_reason in {"stop", "length"}
    assert completion.usage is not None
    assert completion.usage.completion_tokens <= 10
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    assert _extra(completion)["weight_version"] == "v0"


def test_chat_completion_logprobs_and_token_exact_meta_info(sdk: openai.OpenAI) -> None:
    completion = _chat(sdk, logprobs=True, top_logprobs=2)
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    content = logprobs.content
    meta = _extra(completion)["meta_info"]
    assert completion.usage is not None
    assert len(content) == len(meta["output_ids"]) == completion.usage.completion_tokens
    assert len(meta["input_ids"]) == completion.usage.prompt_tokens
    assert [e[1] for e in meta["output_token_logprobs"]] == meta["output_ids"]
    assert [c.logprob for c in content] == [e[0] for e in meta["output_token_logprobs"]]
    assert all(len(c.top_logprobs) == 2 for c in content)
    assert meta["weight_version"] == "v0"


def test_chat_completion_stream_matches_buffered(sdk: openai.OpenAI) -> None:
    buffered = _chat(sdk)
    stream = sdk.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Return exactly: hello"}],
        temperature=0,
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == buffered.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == buffered.choices[0].finish_reason
    assert chunks[-1].usage is not None
    assert buffered.usage is not None
    assert chunks[-1].usage.completion_tokens == buffered.usage.completion_tokens
    assert {_extra(c)["weight_version"] for c in chunks} == {"v0"}


def test_chat_stream_sse_ends_with_done(engine: EngineProcess, http: httpx.Client) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 3,
        "temperature": 0,
    }
    with http.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"


def test_abandoned_streams_give_their_slots_back(engine: EngineProcess) -> None:
    """More abandoned streams than generation slots; a request afterwards still runs."""
    body = {
        "text": PROMPT,
        "stream": True,
        "sampling_params": {"max_new_tokens": 900, "temperature": 0, "ignore_eos": True},
    }
    for _ in range(6):  # --max-concurrency defaults to 4
        with (
            httpx.Client(timeout=30.0) as client,
            client.stream("POST", f"{engine.url}/generate", json=body) as response,
        ):
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
    with httpx.Client(timeout=20.0) as client:
        assert greedy(client, engine.url, max_new_tokens=4)["meta_info"]["completion_tokens"] == 4


def test_chat_rejects_n_above_one(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        _chat(sdk, n=2)


# -- control API failures leave the old weights serving ------------------------------


def _update(http: httpx.Client, url: str, path: str, version: str) -> httpx.Response:
    body = {"model_path": path, "weight_version": version}
    return http.post(f"{url}/update_weights_from_disk", json=body)


def test_update_from_missing_path_fails_and_old_weights_serve(
    mutable: EngineProcess, http: httpx.Client, tmp_path: Path
) -> None:
    before = greedy(http, mutable.url)
    response = _update(http, mutable.url, str(tmp_path / "missing"), "never")
    assert response.status_code == 400
    body = response.json()
    assert set(body) == {"success", "message", "num_paused_requests"}
    assert body["success"] is False and "does not exist" in body["message"]
    after = greedy(http, mutable.url)
    assert after["output_ids"] == before["output_ids"]
    assert after["meta_info"]["weight_version"] == before["meta_info"]["weight_version"]


def test_update_with_mismatched_shapes_fails_and_old_weights_serve(
    mutable: EngineProcess, http: httpx.Client, weight_sets: WeightSets
) -> None:
    before = greedy(http, mutable.url)
    response = _update(http, mutable.url, str(weight_sets.mismatched), "never")
    assert response.status_code == 400
    assert response.json()["success"] is False
    assert "shape mismatch: lm_head.weight" in response.json()["message"]
    after = greedy(http, mutable.url)
    assert after["output_ids"] == before["output_ids"]
    assert after["meta_info"]["weight_version"] != "never"


def test_corrupt_weights_file_fails_and_old_weights_serve(
    mutable: EngineProcess, http: httpx.Client, tmp_path: Path
) -> None:
    before = greedy(http, mutable.url)
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors at all")
    response = _update(http, mutable.url, str(tmp_path), "never")
    assert response.status_code == 400
    assert "cannot read model.safetensors" in response.json()["message"]
    assert greedy(http, mutable.url)["output_ids"] == before["output_ids"]


def test_rewriting_loaded_files_does_not_touch_served_weights(
    mutable: EngineProcess,
    http: httpx.Client,
    weight_sets: WeightSets,
    start_folder: Path,
    tmp_path: Path,
) -> None:
    """Weights are read into memory, not mapped: truncating the files is harmless."""
    served_a = greedy(http, mutable.url)
    assert http.get(f"{mutable.url}/get_model_info").json()["model_path"] == str(start_folder)
    with (start_folder / "model.safetensors").open("r+b") as file:
        file.truncate(0)  # the folder the engine started from
    assert greedy(http, mutable.url)["output_ids"] == served_a["output_ids"]
    copy = tmp_path / "b"
    shutil.copytree(weight_sets.seed_b, copy)
    assert _update(http, mutable.url, str(copy), "b-copy").json()["success"] is True
    served_b = greedy(http, mutable.url)
    with (copy / "model.safetensors").open("r+b") as file:
        file.truncate(0)  # the folder of the last update
    assert greedy(http, mutable.url)["output_ids"] == served_b["output_ids"]
    _update(http, mutable.url, str(weight_sets.seed_a), "a")


def test_update_from_disk_swaps_weights_and_version(
    mutable: EngineProcess, http: httpx.Client, weight_sets: WeightSets
) -> None:
    response = _update(http, mutable.url, str(weight_sets.seed_a), "a")
    assert response.json() == {
        "success": True,
        "message": "Succeeded to update model weights.",
        "num_paused_requests": 0,
    }
    served_a = greedy(http, mutable.url)
    assert _update(http, mutable.url, str(weight_sets.seed_b), "b").json()["success"] is True
    served_b = greedy(http, mutable.url)
    assert served_b["meta_info"]["weight_version"] == "b"
    assert served_b["output_ids"] != served_a["output_ids"]
    info = http.get(f"{mutable.url}/get_model_info").json()
    assert info["weight_version"] == "b"
    _update(http, mutable.url, str(weight_sets.seed_a), "a")
    assert greedy(http, mutable.url)["output_ids"] == served_a["output_ids"]


def test_update_to_a_builtin_name_restores_its_weights(
    mutable: EngineProcess, http: httpx.Client, weight_sets: WeightSets
) -> None:
    _update(http, mutable.url, str(weight_sets.seed_a), "a")
    served_a = greedy(http, mutable.url)
    _update(http, mutable.url, str(weight_sets.seed_b), "b")
    assert _update(http, mutable.url, "tiny", "base").json()["success"] is True
    restored = greedy(http, mutable.url)
    assert restored["output_ids"] == served_a["output_ids"]
    assert restored["meta_info"]["weight_version"] == "base"


def test_lora_adapter_load_use_unload(
    mutable: EngineProcess, http: httpx.Client, weight_sets: WeightSets
) -> None:
    url = mutable.url
    loaded = http.post(
        f"{url}/load_lora_adapter", json={"lora_name": "ad", "lora_path": str(weight_sets.adapter)}
    )
    assert loaded.json() == {
        "success": True,
        "error_message": None,
        "loaded_adapters": {"ad": str(weight_sets.adapter)},
    }
    base = greedy(http, url)
    adapted = greedy(http, url, lora_path="ad")
    assert adapted["output_ids"] != base["output_ids"]
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in sdk.models.list()] == ["m", "ad"]
    by_model = http.post(
        f"{url}/v1/chat/completions",
        json={
            "model": "ad",
            "messages": [{"role": "user", "content": "x"}],
            "temperature": 0,
            "max_tokens": 5,
            "logprobs": True,
        },
    ).json()
    by_lora_path = http.post(
        f"{url}/v1/chat/completions",
        json={
            "model": "tiny",
            "lora_path": "ad",
            "messages": [{"role": "user", "content": "x"}],
            "temperature": 0,
            "max_tokens": 5,
            "logprobs": True,
        },
    ).json()
    assert by_model["meta_info"]["output_ids"] == by_lora_path["meta_info"]["output_ids"]
    again = http.post(
        f"{url}/load_lora_adapter", json={"lora_name": "ad", "lora_path": str(weight_sets.adapter)}
    )
    assert again.status_code == 400 and again.json()["success"] is False
    unloaded = http.post(f"{url}/unload_lora_adapter", json={"lora_name": "ad"}).json()
    assert unloaded == {"success": True, "error_message": None, "loaded_adapters": {}}
    assert http.post(f"{url}/unload_lora_adapter", json={"lora_name": "ad"}).status_code == 400


def test_bad_lora_folder_fails(mutable: EngineProcess, http: httpx.Client, tmp_path: Path) -> None:
    response = http.post(
        f"{mutable.url}/load_lora_adapter", json={"lora_name": "x", "lora_path": str(tmp_path)}
    )
    assert response.status_code == 400
    assert "not a PEFT adapter" in response.json()["error_message"]


def test_adapter_folder_on_disk_update_becomes_the_default(
    mutable: EngineProcess, http: httpx.Client, weight_sets: WeightSets
) -> None:
    _update(http, mutable.url, str(weight_sets.seed_a), "a")
    base = greedy(http, mutable.url)
    assert _update(http, mutable.url, str(weight_sets.adapter), "a+lora").json()["success"]
    adapted = greedy(http, mutable.url)
    assert adapted["meta_info"]["weight_version"] == "a+lora"
    assert adapted["output_ids"] != base["output_ids"]
    # a second adapter update replaces the first instead of stacking on it
    assert _update(http, mutable.url, str(weight_sets.adapter), "a+lora2").json()["success"]
    assert greedy(http, mutable.url)["output_ids"] == adapted["output_ids"]
    _update(http, mutable.url, str(weight_sets.seed_a), "a")
    assert greedy(http, mutable.url)["output_ids"] == base["output_ids"]


def test_group_routes_fail_cleanly_without_a_group(
    mutable: EngineProcess, http: httpx.Client
) -> None:
    url = mutable.url
    update = http.post(
        f"{url}/update_weights_from_distributed",
        json={
            "names": ["lm_head.weight"],
            "dtypes": ["float32"],
            "shapes": [[68, 64]],
        },
    )
    assert update.status_code == 400
    assert set(update.json()) == {"success", "message"}
    assert "no weight update group" in update.json()["message"]
    destroy = http.post(f"{url}/destroy_weights_update_group", json={"group_name": "g"})
    assert destroy.status_code == 400
    bad = http.post(
        f"{url}/init_weights_update_group",
        json={
            "master_address": "127.0.0.1",
            "master_port": 1,
            "rank_offset": 1,
            "world_size": 2,
            "backend": "nccl",
        },
    )
    assert bad.status_code == 400 and "cuda" in bad.json()["message"]


def test_gloo_broadcast_publishes_weights(
    mutable: EngineProcess, http: httpx.Client, weight_sets: WeightSets
) -> None:
    from reef.engine.broadcast import publish_weights
    from reef.modelkit import tiny

    _update(http, mutable.url, str(weight_sets.seed_b), "b")
    served_b = greedy(http, mutable.url)
    _update(http, mutable.url, str(weight_sets.seed_a), "a")
    result = publish_weights(tiny.build_model(seed=1), [mutable.url], "b-broadcast", timeout_s=60)
    assert result.tensors == len(tiny.build_model().state_dict())
    served = greedy(http, mutable.url)
    assert served["meta_info"]["weight_version"] == "b-broadcast"
    assert served["output_ids"] == served_b["output_ids"]
    # the group is gone on both sides: a second publish works
    publish_weights(tiny.build_model(), [mutable.url], "a-broadcast", timeout_s=60)
    assert greedy(http, mutable.url)["meta_info"]["weight_version"] == "a-broadcast"


def test_a_publish_whose_group_never_formed_leaves_the_next_one_working(
    mutable: EngineProcess, http: httpx.Client
) -> None:
    """torch numbers its default group by a counter a failed join consumes and never
    resets (reef.engine.default_group): without resetting it, every later publish of
    this process waited out its timeout under rendezvous keys no engine used."""
    from reef.engine.broadcast import free_port, publish_weights
    from reef.engine.errors import WeightPublishError
    from reef.modelkit import tiny

    nobody = f"http://127.0.0.1:{free_port()}"  # no engine answers: the group never forms
    with pytest.raises(WeightPublishError, match="could not form the group"):
        publish_weights(tiny.build_model(), [nobody], "never", timeout_s=2)
    publish_weights(tiny.build_model(seed=1), [mutable.url], "after-a-failure", timeout_s=30)
    assert greedy(http, mutable.url)["meta_info"]["weight_version"] == "after-a-failure"


# -- the typed client -----------------------------------------------------------------


def test_engine_client_reads_typed_results(
    mutable: EngineProcess, weight_sets: WeightSets, tmp_path: Path
) -> None:
    with EngineClient(mutable.url) as client:
        assert client.health() is True
        assert client.flush_cache() is True
        updated = client.update_weights_from_disk(str(weight_sets.seed_a), "typed")
        assert updated.success and updated.num_paused_requests == 0
        assert client.model_info().weight_version == "typed"
        refused = client.update_weights_from_disk(str(tmp_path / "missing"), "never")
        assert refused.success is False and "does not exist" in refused.message
        loaded = client.load_lora_adapter("t", str(weight_sets.adapter))
        assert loaded.loaded_adapters == {"t": str(weight_sets.adapter)}
        assert client.unload_lora_adapter("t").loaded_adapters == {}


def test_engine_client_raises_on_transport_errors() -> None:
    with (
        EngineClient(dead_url().removesuffix("/v1"), timeout_s=2) as client,
        pytest.raises(EngineUnavailableError),
    ):
        client.model_info()
