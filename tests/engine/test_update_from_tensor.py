"""``/update_weights_from_tensor`` on a real engine process: SGLang's colocated update.

The tensors travel as :class:`EngineClient` serializes them (SGLang's
``MultiprocessingSerializer`` form: base64 of pickled ``[(name, tensor)]``, one entry per
TP rank; CPU tensors as their bytes). Every test starts from the built-in weights (A).
"""

from __future__ import annotations

import asyncio
import base64
import io
import pickle
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from reef.engine.config import EngineConfig
from reef.engine.engine_client import EngineClient, serialized
from reef.engine.server import create_app
from reef.modelkit.weights import read_safetensors_dir
from tests.support.engine import EngineProcess, WeightSets, greedy, running_engine

Named = list[tuple[str, torch.Tensor]]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    logs = tmp_path_factory.mktemp("tensor-engine-logs")
    with running_engine(logs, "--weight-version", "a") as e:
        yield e


@pytest.fixture
def client(engine: EngineProcess) -> Iterator[EngineClient]:
    with EngineClient(engine.url, timeout_s=60.0) as c:
        assert c.update_weights_from_disk("tiny", "a").success  # back to A
        yield c


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as c:
        yield c


@pytest.fixture(scope="module")
def weights_b(weight_sets: WeightSets) -> Named:
    return sorted(read_safetensors_dir(weight_sets.seed_b).items())


def answer(http: httpx.Client, engine: EngineProcess) -> tuple[list[int], str]:
    body = greedy(http, engine.url)
    return body["output_ids"], body["meta_info"]["weight_version"]


def post(http: httpx.Client, engine: EngineProcess, **body: Any) -> httpx.Response:
    return http.post(f"{engine.url}/update_weights_from_tensor", json=body)


class _RunsCode:
    """A payload entry that would run a command when unpickled by a plain unpickler."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_tensor_update_serves_what_a_disk_update_of_the_same_weights_serves(
    engine: EngineProcess,
    client: EngineClient,
    http: httpx.Client,
    weight_sets: WeightSets,
    weights_b: Named,
) -> None:
    ids_a, _ = answer(http, engine)
    result = client.update_weights_from_tensor(weights_b, "b-tensor")
    assert result.success, result.message
    by_tensor = answer(http, engine)
    assert client.model_info().weight_version == "b-tensor"
    assert client.update_weights_from_disk(str(weight_sets.seed_b), "b-disk").success
    by_disk = answer(http, engine)
    assert by_tensor == (by_disk[0], "b-tensor")
    assert by_disk == (by_tensor[0], "b-disk")
    assert by_tensor[0] != ids_a


def test_two_partial_updates_that_cover_every_name_serve_the_full_update(
    engine: EngineProcess,
    client: EngineClient,
    http: httpx.Client,
    weight_sets: WeightSets,
    weights_b: Named,
) -> None:
    half = len(weights_b) // 2
    assert client.update_weights_from_tensor(weights_b[:half], "b-half").success
    assert client.model_info().weight_version == "b-half"
    assert client.update_weights_from_tensor(weights_b[half:], "b-both").success
    by_parts = answer(http, engine)
    assert client.update_weights_from_disk(str(weight_sets.seed_b), "b-disk").success
    assert by_parts == (answer(http, engine)[0], "b-both")


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda t: [*t, ("model.no_such.weight", torch.zeros(2))], "unexpected tensor names"),
        (lambda t: [*t[:-1], (t[-1][0], t[-1][1].reshape(-1)[:-1])], "shape mismatch"),
        (lambda t: [*t[:-1], (t[-1][0], t[-1][1].to(torch.float16))], "dtype mismatch"),
        (lambda t: [*t, t[0]], "names must not repeat"),
    ],
    ids=["unknown-name", "shape", "dtype", "repeated-name"],
)
def test_a_payload_with_one_bad_tensor_changes_nothing(
    engine: EngineProcess,
    client: EngineClient,
    http: httpx.Client,
    weights_b: Named,
    spoil: Any,
    reason: str,
) -> None:
    before = answer(http, engine)
    response = post(http, engine, serialized_named_tensors=serialized(spoil(weights_b)))
    assert response.status_code == 400
    body = response.json()
    assert body["success"] is False
    assert reason in body["message"]
    assert answer(http, engine) == before == (before[0], "a")


def test_refused_load_formats_and_unreadable_payloads_change_nothing(
    engine: EngineProcess,
    client: EngineClient,
    http: httpx.Client,
    weights_b: Named,
    tmp_path: Path,
) -> None:
    before = answer(http, engine)
    marker = tmp_path / "ran"
    runs_code = base64.b64encode(pickle.dumps([("x", _RunsCode(marker))])).decode()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"load_format": "flattened_bucket"}, "unsupported load_format 'flattened_bucket'"),
        ({"load_format": "safetensors"}, "unsupported load_format 'safetensors'"),
        ({"serialized_named_tensors": []}, "serialized_named_tensors is empty"),
        ({"serialized_named_tensors": ["not base64!"]}, "cannot read serialized_named_tensors"),
        ({"serialized_named_tensors": [runs_code]}, "refused global pathlib"),
    ]
    for extra, reason in cases:
        body = {"serialized_named_tensors": serialized(weights_b), **extra}
        response = post(http, engine, **body)
        assert response.status_code == 400, extra
        assert response.json()["success"] is False
        assert reason in response.json()["message"], response.json()
    assert not marker.exists()
    assert answer(http, engine) == before
    direct = client.update_weights_from_tensor(weights_b, "b-direct", load_format="direct")
    assert direct.success, direct.message


def test_torch_shared_memory_form_from_an_unrelated_process_is_refused_not_crashed(
    engine: EngineProcess, client: EngineClient, http: httpx.Client, weights_b: Named
) -> None:
    """Why Reef's client sends CPU tensors as bytes: the engine cannot collect a
    shared-memory handle from a process it does not share a multiprocessing key with."""
    before = answer(http, engine)
    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(weights_b[:1])
    entry = base64.b64encode(buffer.getvalue()).decode()
    response = post(http, engine, serialized_named_tensors=[entry])
    assert response.status_code == 400
    assert "cannot rebuild a tensor: AuthenticationError" in response.json()["message"]
    assert answer(http, engine) == before


@pytest.mark.parametrize("host", ["10.1.2.3", "192.168.0.7", "::ffff:10.0.0.1", "2001:db8::1"])
def test_callers_off_loopback_are_refused_before_the_payload_is_read(
    tmp_path: Path, host: str
) -> None:
    marker = tmp_path / "ran"
    entry = base64.b64encode(pickle.dumps([("x", _RunsCode(marker))])).decode()

    async def call(client_host: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(EngineConfig()), client=(client_host, 5))
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as c:
            body = {"serialized_named_tensors": [entry]}
            return await c.post("/update_weights_from_tensor", json=body)

    response = asyncio.run(call(host))
    assert response.status_code == 403
    assert response.json() == {
        "success": False,
        "message": "update_weights_from_tensor: loopback callers only",
    }
    assert not marker.exists()
