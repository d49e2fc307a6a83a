"""A committed release pushed by the trainer over a gloo weights group to two engines,
and the sidecars' fallback to disk when no push arrives.

Two real engine processes; two sidecars (``engine_load_method: broadcast``) run in this
process on an embedded log and a local artifact store; the trainer's publishing step
(:class:`trainers.publish.Publisher`, what the trainer calls once the chain committed
its candidate as the head) runs in a worker thread as in the trainer. The chain is not
running: the test appends the ``ReleaseCommitted`` it would have appended. gloo stands
in for NCCL: the GPU path is not run here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import httpx
import pytest

from reef.core import topics
from reef.core.events import EngineLoaded
from reef.engine.engine_client import AsyncEngineClient, EngineClient
from reef.log import running
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.sidecar.runner import Sidecar, SidecarConfig
from tests.support.engine import EngineProcess, WeightSets, greedy, start_engine
from tests.support.sidecar import content_store, head_of_folder
from trainers.publish import Outcome, PublishConfig, Publisher

SCENARIO = "pushed"
#: a port nothing listens on (the engines are started on free ports)
DEAD_ENGINE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EngineProcess]]:
    logs = tmp_path_factory.mktemp("broadcast-release-engine-logs")
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two start at once
        starts = [pool.submit(start_engine, logs, "--weight-version", "base") for _ in range(2)]
    started = [f.result() for f in starts if f.exception() is None]
    try:
        if len(started) < len(starts):
            raise next(e for f in starts if (e := f.exception()) is not None)
        yield started
    finally:
        for engine in started:
            engine.stop()


def served(url: str) -> tuple[list[int], str]:
    with httpx.Client(timeout=60.0) as http:
        body = greedy(http, url)
    return body["output_ids"], body["meta_info"]["weight_version"]


async def _loaded(store: EventStore, engine_id: str, release_id: str) -> EngineLoaded:
    async for stored in store.read(topics.ENGINE, follow=True, scenario=SCENARIO):
        event = stored.event
        if isinstance(event, EngineLoaded) and (event.engine_id, event.release_id) == (
            engine_id,
            release_id,
        ):
            return event
    raise AssertionError("the engine topic ended")


def release_with_sidecars(
    state_dir: Path,
    engines: list[EngineProcess],
    folder: Path,
    publisher: Publisher | None,
    push_wait_s: float,
    load_method: Literal["broadcast", "pushed_tensor"] = "broadcast",
) -> tuple[list[EngineLoaded], Outcome | None]:
    """Start a sidecar per engine that waits for pushes (``load_method``), commit
    ``folder`` as the head, let ``publisher`` push it (None: no push), and return what
    each sidecar recorded."""
    content = content_store(state_dir)
    release = head_of_folder(state_dir, SCENARIO, folder)

    async def run() -> tuple[list[EngineLoaded], Outcome | None]:
        async with running(EmbeddedLog(state_dir / "log.sqlite3")) as log:
            await log.ensure_topics(list(topics.ALL_TOPICS))
            store = EventStore(log)
            clients = [AsyncEngineClient(e.url, timeout_s=60.0) for e in engines]
            sidecars = [
                asyncio.create_task(
                    Sidecar(
                        SidecarConfig(
                            engine_id=f"engine-{index}",
                            scenario=SCENARIO,
                            cache_dir=state_dir / f"cache-{index}",
                            producer=f"test-sidecar-{index}",
                            load_method=load_method,
                            push_wait_s=push_wait_s,
                        ),
                        store,
                        content,
                        client,
                    ).run()
                )
                for index, client in enumerate(clients)
            ]
            try:
                await asyncio.sleep(0.3)  # the sidecars follow an empty chain
                await store.append(release)
                outcome = (
                    None
                    if publisher is None
                    else await asyncio.to_thread(publisher.publish, folder, release.release_id)
                )
                events = await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            _loaded(store, f"engine-{i}", release.release_id)
                            for i in range(len(engines))
                        )
                    ),
                    60.0,
                )
                return list(events), outcome
            finally:
                for task in sidecars:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                for client in clients:
                    await client.aclose()

    return asyncio.run(run())


def disk_fingerprint(engine: EngineProcess, folder: Path, version: str) -> list[int]:
    with EngineClient(engine.url, timeout_s=60.0) as client:
        assert client.update_weights_from_disk(str(folder), version).success
    ids, served_version = served(engine.url)
    assert served_version == version
    return ids


def test_a_committed_release_is_broadcast_to_both_engines_and_recorded(
    engines: list[EngineProcess], weight_sets: WeightSets, tmp_path: Path
) -> None:
    before = [served(e.url)[0] for e in engines]
    publisher = Publisher(
        PublishConfig("broadcast", tuple(e.url for e in engines), "cpu", timeout_s=30.0)
    )
    events, outcome = release_with_sidecars(
        tmp_path, engines, weight_sets.seed_b, publisher, push_wait_s=30.0
    )
    assert outcome == "ok"
    assert [(e.method, e.weight_version) for e in events] == [
        ("broadcast", events[0].release_id)
    ] * 2
    pushed = [served(e.url) for e in engines]
    assert pushed[0] == pushed[1] and pushed[0][1] == events[0].release_id
    assert pushed[0][0] != before[0]
    assert disk_fingerprint(engines[0], weight_sets.seed_b, "b-disk") == pushed[0][0]


def test_without_a_push_the_sidecars_load_the_release_from_disk(
    engines: list[EngineProcess], weight_sets: WeightSets, tmp_path: Path
) -> None:
    events, outcome = release_with_sidecars(
        tmp_path, engines, weight_sets.seed_a, None, push_wait_s=1.0
    )
    assert outcome is None
    assert [(e.method, e.weight_version) for e in events] == [("disk", events[0].release_id)] * 2
    fingerprints = [served(e.url) for e in engines]
    assert fingerprints[0] == fingerprints[1] and fingerprints[0][1] == events[0].release_id
    assert disk_fingerprint(engines[1], weight_sets.seed_a, "a-disk") == fingerprints[0][0]


def test_a_failed_broadcast_is_counted_and_the_sidecars_load_from_disk(
    engines: list[EngineProcess], weight_sets: WeightSets, tmp_path: Path
) -> None:
    # an engine of the list does not answer: the group never forms (rank 0 gives up after
    # timeout_s) and no engine serves the push
    publisher = Publisher(PublishConfig("broadcast", (DEAD_ENGINE,), "cpu", timeout_s=2.0))
    events, outcome = release_with_sidecars(
        tmp_path, engines, weight_sets.seed_b, publisher, push_wait_s=1.0
    )
    assert outcome == "failed"
    assert [e.method for e in events] == ["disk", "disk"]
    assert all(served(e.url)[1] == events[0].release_id for e in engines)


def test_the_tensor_option_pushes_to_engines_on_this_machine_and_is_recorded(
    engines: list[EngineProcess], weight_sets: WeightSets, tmp_path: Path
) -> None:
    publisher = Publisher(
        PublishConfig("tensor", tuple(e.url for e in engines), "cpu", timeout_s=30.0)
    )
    events, outcome = release_with_sidecars(
        tmp_path, engines, weight_sets.seed_a, publisher, 30.0, "pushed_tensor"
    )
    assert outcome == "ok"
    assert [(e.method, e.weight_version) for e in events] == [("tensor", events[0].release_id)] * 2
    pushed = [served(e.url) for e in engines]
    assert pushed[0] == pushed[1] and pushed[0][1] == events[0].release_id
    assert disk_fingerprint(engines[1], weight_sets.seed_a, "a-disk-2") == pushed[0][0]


def test_a_tensor_push_that_fails_is_counted_and_an_adapter_is_not_pushed(
    weight_sets: WeightSets,
) -> None:
    dead = Publisher(PublishConfig("tensor", (DEAD_ENGINE,), "cpu", timeout_s=5.0))
    assert dead.publish(weight_sets.seed_a, "never") == "failed"
    assert dead.publish(weight_sets.adapter, "adapter") == "skipped"
