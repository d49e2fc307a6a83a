"""The sidecar with ``engine_load_method: tensor``: a committed release reaches the engine
by ``/update_weights_from_tensor``, and by disk when the engine refuses the tensors.

The sidecar runs in this process on an embedded log and a local artifact store; the
engine is a real process. The chain is not running: the test appends the
``ReleaseCommitted`` it would have appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import save_file

from reef.core import topics
from reef.core.events import EngineLoaded
from reef.engine.engine_client import AsyncEngineClient, EngineClient
from reef.log import running
from reef.log.embedded import EmbeddedLog
from reef.modelkit.weights import read_safetensors_dir
from reef.services.eventstore import EventStore
from reef.sidecar.runner import Sidecar, SidecarConfig
from tests.support.engine import EngineProcess, WeightSets, greedy, running_engine
from tests.support.sidecar import content_store, head_of_folder

SCENARIO = "colocated"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    logs = tmp_path_factory.mktemp("sidecar-tensor-engine-logs")
    with running_engine(logs, "--weight-version", "base") as e:
        yield e


async def _loaded(store: EventStore, release_id: str) -> EngineLoaded:
    async for stored in store.read(topics.ENGINE, follow=True, scenario=SCENARIO):
        if isinstance(stored.event, EngineLoaded) and stored.event.release_id == release_id:
            return stored.event
    raise AssertionError("the engine topic ended")


def load_release(state_dir: Path, engine: EngineProcess, folder: Path) -> EngineLoaded:
    """Commit ``folder`` as the scenario's head and run a tensor-configured sidecar until
    it reports the load."""
    content = content_store(state_dir)
    release = head_of_folder(state_dir, SCENARIO, folder)
    config = SidecarConfig(
        engine_id="local",
        scenario=SCENARIO,
        cache_dir=state_dir / "engine-cache",
        producer="test-sidecar",
        load_method="tensor",
    )

    async def run() -> EngineLoaded:
        async with running(EmbeddedLog(state_dir / "log.sqlite3")) as log:
            await log.ensure_topics(list(topics.ALL_TOPICS))
            store = EventStore(log)
            await store.append(release)
            client = AsyncEngineClient(engine.url, timeout_s=60.0)
            sidecar = asyncio.create_task(Sidecar(config, store, content, client).run())
            try:
                return await asyncio.wait_for(_loaded(store, release.release_id), 60.0)
            finally:
                sidecar.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sidecar
                await client.aclose()

    return asyncio.run(run())


def served(engine: EngineProcess) -> tuple[list[int], str]:
    with httpx.Client(timeout=60.0) as http:
        body = greedy(http, engine.url)
    return body["output_ids"], body["meta_info"]["weight_version"]


def test_a_committed_release_is_loaded_by_tensor_and_serves_its_weights(
    engine: EngineProcess, weight_sets: WeightSets, tmp_path: Path
) -> None:
    before, _ = served(engine)
    event = load_release(tmp_path, engine, weight_sets.seed_b)
    assert (event.method, event.weight_version) == ("tensor", event.release_id)
    by_tensor = served(engine)
    assert by_tensor == (by_tensor[0], event.release_id) and by_tensor[0] != before
    with EngineClient(engine.url, timeout_s=60.0) as client:
        assert client.update_weights_from_disk(str(weight_sets.seed_b), "b-disk").success
    assert served(engine) == (by_tensor[0], "b-disk")


def test_a_release_the_tensor_route_refuses_is_loaded_from_disk(
    engine: EngineProcess,
    weight_sets: WeightSets,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # float16 weights for a float32 engine: the tensor route refuses the dtype, a disk
    # load casts them
    half = tmp_path / "half"
    half.mkdir()
    tensors = read_safetensors_dir(weight_sets.seed_b)
    save_file({k: v.to(torch.float16) for k, v in tensors.items()}, half / "model.safetensors")
    with caplog.at_level(logging.WARNING, logger="reef.sidecar.runner"):
        event = load_release(tmp_path / "state", engine, half)
    assert (event.method, event.weight_version) == ("disk", event.release_id)
    assert "dtype mismatch" in caplog.text and "loading from disk" in caplog.text
    with EngineClient(engine.url, timeout_s=60.0) as client:
        assert client.model_info().weight_version == event.release_id
