"""The model folder's sampling defaults (``generation_config.json``), as SGLang's
``--sampling-defaults model``: a request's omitted temperature, top-p and top-k come from
the folder, then from the API's defaults; what the request sets wins; ``openai`` ignores
the folder. On the API routes: chat completions, Anthropic messages and Responses; SGLang's
native ``/generate`` keeps SGLang's own defaults, as SGLang's native API does.

A Qwen2 folder is built here (random weights, :mod:`tests.support.model_folders`) and
copied with the generation configs under test. Which sampling a route resolved is read
where it enters the runtime (the :class:`GenerationRequest` the decoder runs); that
greedy defaults decode greedily is checked on the answers' token ids.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from reef.engine.config import EngineConfig
from reef.engine.errors import EngineError, WeightLoadError
from reef.engine.generation import Sampling
from reef.engine.loader import generation_defaults
from reef.engine.runtime import EngineRuntime, GenerationRequest
from reef.engine.sampling_defaults import NO_MODEL_DEFAULTS, SamplingDefaults, defaults_of
from reef.engine.server import create_app
from reef.engine.sglang_launch import SglangLaunch, sglang_argv
from tests.support.learning_loop import COPY, WORDS
from tests.support.model_folders import build_folder

#: Qwen2.5-7B-Instruct's generation_config.json, as the hub ships it
QWEN25_INSTRUCT = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "repetition_penalty": 1.05,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "transformers_version": "4.37.0",
}
QWEN25 = Sampling(temperature=0.7, top_p=0.8, top_k=20)
API = Sampling(temperature=1.0, top_p=1.0, top_k=-1)
QUESTION = "Return exactly: bakope"
#: one request per route, sampling left out; ``sampling`` adds the request's own fields
ROUTES = ("chat", "messages", "responses")


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sampling-defaults")
    texts = [COPY.prompt(w) for w in WORDS[:200]] + WORDS[:200]
    return build_folder(root / "qwen2", "qwen2", texts)


@pytest.fixture(scope="module")
def folder_with(
    base_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[dict[str, Any]], Path]:
    """A copy of the folder whose generation_config.json also says ``settings``."""

    def make(settings: dict[str, Any]) -> Path:
        out = tmp_path_factory.mktemp("variant") / "folder"
        shutil.copytree(base_folder, out)
        path = out / "generation_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))
        return out

    return make


@pytest.fixture(scope="module")
def greedy_folder(folder_with: Callable[[dict[str, Any]], Path]) -> Path:
    return folder_with({"do_sample": False})


@pytest.fixture(scope="module")
def qwen_folder(folder_with: Callable[[dict[str, Any]], Path]) -> Path:
    return folder_with(QWEN25_INSTRUCT)


def _body(route: str, **sampling: Any) -> tuple[str, dict[str, Any]]:
    """The route's path and a request of 8 new tokens with a token record."""
    messages = [{"role": "user", "content": QUESTION}]
    if route == "chat":
        return "/v1/chat/completions", {
            "messages": messages,
            "max_tokens": 8,
            "logprobs": True,
            **sampling,
        }
    if route == "messages":
        return "/v1/messages", {"messages": messages, "max_tokens": 8, "logprobs": True, **sampling}
    if route == "responses":
        return "/v1/responses", {
            "input": QUESTION,
            "max_output_tokens": 8,
            "logprobs": True,
            **sampling,
        }
    return "/generate", {"text": QUESTION, "sampling_params": {"max_new_tokens": 8, **sampling}}


def _output_ids(client: TestClient, route: str, **sampling: Any) -> list[int]:
    path, body = _body(route, **sampling)
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    reply = response.json()
    ids = reply["output_ids"] if route == "generate" else reply["meta_info"]["output_ids"]
    return [int(i) for i in ids]


class Resolved:
    """The sampling of each request as it reaches the runtime (and so the decoder)."""

    def __init__(self, runtime: EngineRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[Sampling] = []
        complete = runtime.complete

        async def recording(request: GenerationRequest) -> Any:
            self.seen.append(request.sampling)
            return await complete(request)

        monkeypatch.setattr(runtime, "complete", recording)

    def of(self, client: TestClient, route: str, **sampling: Any) -> Sampling:
        """(temperature, top_p, top_k) the route resolved for one request."""
        _output_ids(client, route, **sampling)
        last = self.seen[-1]
        return Sampling(temperature=last.temperature, top_p=last.top_p, top_k=last.top_k)


@pytest.fixture
def qwen_engine(
    qwen_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, Resolved]]:
    with TestClient(create_app(EngineConfig(model=str(qwen_folder)))) as client:
        yield client, Resolved(client.app.state.runtime, monkeypatch)  # type: ignore[attr-defined]


# -- what the folder sets ----------------------------------------------------------------


def test_the_defaults_are_the_numbers_the_file_sets_and_do_sample_false_is_greedy() -> None:
    assert defaults_of(QWEN25_INSTRUCT) == SamplingDefaults(temperature=0.7, top_p=0.8, top_k=20)
    assert defaults_of({"do_sample": False, "temperature": 0.7}).temperature == 0.0
    assert defaults_of({"top_p": 0.9}) == SamplingDefaults(top_p=0.9)
    assert defaults_of({"temperature": "hot", "top_k": True, "eos_token_id": 2}) == (
        NO_MODEL_DEFAULTS
    )
    # what a field left unset resolves to: the request's, else the model's, else the API's
    qwen = defaults_of(QWEN25_INSTRUCT)
    assert (qwen.temperature_for(None), qwen.top_p_for(None), qwen.top_k_for(None)) == (
        0.7,
        0.8,
        20,
    )
    assert (qwen.temperature_for(0.0), qwen.top_p_for(1.0), qwen.top_k_for(-1)) == (0.0, 1.0, -1)
    none = NO_MODEL_DEFAULTS
    assert (none.temperature_for(None), none.top_p_for(None), none.top_k_for(None)) == (
        1.0,
        1.0,
        -1,
    )


def test_the_loader_reads_the_folders_file_and_the_built_in_model_has_none(
    qwen_folder: Path, base_folder: Path, tmp_path: Path
) -> None:
    assert generation_defaults(str(qwen_folder)) == SamplingDefaults(0.7, 0.8, 20)
    # the file save_pretrained writes names no sampling
    assert generation_defaults(str(base_folder)) == NO_MODEL_DEFAULTS
    assert generation_defaults("tiny") == NO_MODEL_DEFAULTS
    assert generation_defaults(str(tmp_path)) == NO_MODEL_DEFAULTS  # no file
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(WeightLoadError, match=r"generation_config\.json"):
        generation_defaults(str(tmp_path))


# -- every route -------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_a_greedy_folder_answers_a_request_without_temperature_greedily(
    greedy_folder: Path, route: str
) -> None:
    with TestClient(create_app(EngineConfig(model=str(greedy_folder)))) as client:
        unset = [_output_ids(client, route) for _ in range(3)]
        explicit = _output_ids(client, route, temperature=0)
    assert unset == [explicit] * 3


@pytest.mark.parametrize("route", ROUTES)
def test_omitted_fields_take_the_folders_defaults_and_a_requests_own_win(
    qwen_engine: tuple[TestClient, Resolved], route: str
) -> None:
    client, resolved = qwen_engine
    assert resolved.of(client, route) == QWEN25
    assert resolved.of(client, route, temperature=1.0, top_p=1.0, top_k=-1) == API
    assert resolved.of(client, route, temperature=0.2) == Sampling(
        temperature=0.2, top_p=0.8, top_k=20
    )


@pytest.mark.parametrize("route", ROUTES)
def test_sampling_defaults_openai_ignores_the_folder(
    qwen_folder: Path, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = EngineConfig(model=str(qwen_folder), sampling_defaults="openai")
    with TestClient(create_app(config)) as client:
        resolved = Resolved(client.app.state.runtime, monkeypatch)  # type: ignore[attr-defined]
        assert resolved.of(client, route) == API
        assert resolved.of(client, route, top_k=20) == Sampling(top_k=20)


def test_the_native_generate_route_keeps_sglangs_own_defaults(
    qwen_engine: tuple[TestClient, Resolved],
) -> None:
    client, resolved = qwen_engine
    assert resolved.of(client, "generate") == API
    assert resolved.of(client, "generate", temperature=0.2, top_k=20) == Sampling(
        temperature=0.2, top_k=20
    )


# -- the command line --------------------------------------------------------------------


def _engine_config(monkeypatch: pytest.MonkeyPatch, *args: str) -> EngineConfig:
    """The config ``reef engine ARGS`` would serve (the server itself is not started)."""
    import reef.cli.engine as command

    served: list[EngineConfig] = []
    monkeypatch.setattr(command, "run", served.append)
    result = CliRunner().invoke(command.engine, list(args))
    assert result.exit_code == 0, result.output
    return served[0]


def test_reef_engine_defaults_to_the_models_sampling_and_openai_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _engine_config(monkeypatch, "--model", "m").sampling_defaults == "model"
    chosen = _engine_config(monkeypatch, "--model", "m", "--sampling-defaults", "openai")
    assert chosen.sampling_defaults == "openai"


def test_with_the_sglang_backend_the_option_is_passed_on_as_sglangs_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reef.cli.engine as command

    launched: list[dict[str, Any]] = []

    def run_sglang_backend(*args: Any, **kwargs: Any) -> None:
        launched.append(kwargs)

    monkeypatch.setattr(command, "run_sglang_backend", run_sglang_backend)
    base = ["--backend", "sglang", "--model", "m"]
    for extra, passed in (([], None), (["--sampling-defaults", "openai"], "openai")):
        result = CliRunner().invoke(command.engine, [*base, *extra])
        assert result.exit_code == 0, result.output  # not refused as Reef's only
        assert launched[-1]["sampling_defaults"] == passed
    argv = sglang_argv(SglangLaunch(model="m", sampling_defaults="openai", extra_args=("--x",)))
    assert argv[-3:] == ["--sampling-defaults", "openai", "--x"]
    assert "--sampling-defaults" not in sglang_argv(SglangLaunch(model="m"))
    # given to reef engine, --sglang-args may not set it again
    twice = SglangLaunch(model="m", sampling_defaults="openai", extra_args=("--sampling-defaults",))
    with pytest.raises(EngineError, match="--sampling-defaults"):
        sglang_argv(twice)
    alone = SglangLaunch(model="m", extra_args=("--sampling-defaults", "model"))
    assert sglang_argv(alone)[-2:] == ["--sampling-defaults", "model"]
