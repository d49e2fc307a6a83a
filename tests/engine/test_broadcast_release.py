"""A release trained from a report and pushed by the trainer over a gloo weights group to
two engines, and the sidecars' fallback to disk when no push arrives.

Two real engine processes (``reef engine``), shared by the module.

* The release flow end to end, in one run: ``reef serve`` on the embedded log, with
  engine 0 as its upstream, runs the sft trainer in-process (``trainer_publish:
  broadcast`` to both engines); two ``reef sidecar`` processes (``engine_load_method:
  broadcast``) keep the engines on the scenario's head. A request through Reef and a
  report with a correction are joined into a sample, the trainer trains a candidate on
  it, the chain commits it as the head, the trainer broadcasts its weights to both
  engines, both sidecars record ``EngineLoaded(method="broadcast")``; Reef's receipt
  names the new release, engine 1 reports it and answers the same, and both answer what
  the release's folder gives when loaded from disk. (One ``reef serve`` has one upstream:
  engine 1 is asked directly.)
* The publishing step alone: two sidecars run in this process on an embedded log and a
  local artifact store; the trainer's publishing step (:class:`trainers.publish.Publisher`,
  what the trainer calls once the chain committed its candidate as the head) runs in a
  worker thread as in the trainer. The chain is not running: the test appends the
  ``ReleaseCommitted`` it would have appended. This covers no push, a failed broadcast
  and the tensor option.

gloo stands in for NCCL: the GPU path is not run here.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from reef.artifacts import materialise_cached
from reef.artifacts.parts import weights_folder
from reef.core import topics
from reef.core.events import EngineLoaded, ReleaseCommitted, SampleJoined
from reef.engine.engine_client import AsyncEngineClient, EngineClient
from reef.log import running
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.sidecar.runner import Sidecar, SidecarConfig
from reef.testing.servers import (
    ManagedProcess,
    ReefProcess,
    clean_env,
    reef_executable,
    spawn,
    start_reef,
)
from tests.support.engine import EngineProcess, WeightSets, greedy, start_engine
from tests.support.sidecar import (
    chat_body,
    content_store,
    events,
    head_of_folder,
    loaded,
    wait_until,
)
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


# ---------------------------------------------------------------------------
# The release flow end to end: report -> sample -> trainer -> chain -> broadcast -> served

TOKEN = "reef-broadcast-token"
#: the sidecars wait this long for the trainer's push of a head they saw committed
PUSH_WAIT_S = 30.0
#: one sample trains one candidate, which the gate takes (no evaluation tasks needed)
RECIPE = (
    "recipe:\n"
    "  batching: {batch_size: 1}\n"
    "  training: {steps: 1, learning_rate: 0.01}\n"
    "  gate: {policy: always}\n"
)


@dataclass(frozen=True)
class Deployment:
    """``reef serve`` in front of engine 0 (it runs the trainer) and a ``reef sidecar`` per
    engine, on one embedded log."""

    scenario: str
    state: Path
    reef: ReefProcess
    sidecars: list[ManagedProcess]

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        """``wait_until``, failing with every process's output."""
        try:
            return wait_until(what, check, timeout)
        except AssertionError as exc:
            outputs = "\n".join(p.output() for p in [self.reef.managed, *self.sidecars])
            raise AssertionError(f"{exc}\n{outputs}") from None

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": self.scenario}
        return httpx.Client(base_url=self.reef.base_url, headers=headers, timeout=60.0)

    def ask(self) -> tuple[list[int], str, str]:
        """(output ids, receipt, serving release) of a greedy chat request through Reef."""
        with self.client() as client:
            response = client.post("/v1/chat/completions", json=chat_body(False))
        assert response.status_code == 200, response.text
        return (
            response.json()["meta_info"]["output_ids"],
            response.headers["x-reef-agent-record-id"],
            response.headers["x-reef-release-id"],
        )

    def report(self, receipt: str, correction: str) -> None:
        body = {"score": 0.0, "feedback": {"correction": correction}, "references": [receipt]}
        with self.client() as client:
            response = client.post("/reef/report", json=body)
        assert response.status_code in (200, 201, 202), response.text

    def loaded(self, release_id: str) -> list[EngineLoaded] | None:
        """What the two sidecars recorded for ``release_id``, by engine (None until both)."""
        found = sorted(loaded(self.state, self.scenario, release_id), key=lambda e: e.engine_id)
        return found if [e.engine_id for e in found] == ["engine-0", "engine-1"] else None

    def committed_on(self, parent: str) -> ReleaseCommitted | None:
        for event in events(self.state, topics.RELEASES, self.scenario):
            if isinstance(event, ReleaseCommitted) and event.parent_release_id == parent:
                return event
        return None

    def samples(self) -> list[SampleJoined]:
        found = events(self.state, topics.SAMPLES, self.scenario)
        return [e for e in found if isinstance(e, SampleJoined)]

    def publishes(self) -> dict[str, int]:
        """The trainer's publish outcomes (GET /reef/status)."""
        with self.client() as client:
            response = client.get("/reef/status")
        response.raise_for_status()
        counts: dict[str, int] = response.json()["trainer"]["publishes"]
        return counts


def start_sidecar(engine: EngineProcess, index: int, scenario: str, state: Path) -> ManagedProcess:
    argv = [reef_executable(), "sidecar", "--engine", engine.url, "--scenario", scenario]
    argv += ["--engine-id", f"engine-{index}", "--state-dir", str(state)]
    env = {"REEF_ENGINE_LOAD_METHOD": "broadcast", "REEF_ENGINE_PUSH_WAIT_S": str(PUSH_WAIT_S)}
    return spawn(argv, env=clean_env(env), log_dir=state.parent / "logs", name=f"sidecar-{index}")


@contextlib.contextmanager
def deployment(engines: list[EngineProcess], work: Path) -> Iterator[Deployment]:
    """``reef serve`` first (it creates the log and its topics), then the sidecars."""
    recipe = work / "recipe.yaml"
    recipe.write_text(RECIPE)
    state = work / "state"
    scenario = f"broadcast-{uuid.uuid4().hex[:8]}"
    env = {
        "REEF_TOKEN": TOKEN,
        "REEF_RECIPE": "sft",
        "REEF_RECIPE_CONFIG": str(recipe),
        "REEF_TRAINER_PUBLISH": "broadcast",
        "REEF_TRAINER_PUBLISH_ENGINES": ",".join(e.url for e in engines),
        "REEF_TRAINER_PUBLISH_TIMEOUT_S": "30",
    }
    upstream = ["--upstream-url", f"{engines[0].url}/v1"]
    reef = start_reef(upstream, env=env, state_dir=state, log_dir=work / "logs", timeout=120.0)
    sidecars: list[ManagedProcess] = []
    try:
        sidecars += [start_sidecar(e, i, scenario, state) for i, e in enumerate(engines)]
        yield Deployment(scenario, state, reef, sidecars)
    finally:
        for managed in [*sidecars, reef.managed]:  # all at once, then wait for each
            managed.process.terminate()
        for managed in [*sidecars, reef.managed]:
            managed.stop()


def chat(engine: EngineProcess) -> tuple[list[int], str]:
    """(output ids, weight version) of the greedy chat request, asked of the engine."""
    response = httpx.post(f"{engine.url}/v1/chat/completions", json=chat_body(False), timeout=60)
    response.raise_for_status()
    meta = response.json()["meta_info"]
    return meta["output_ids"], meta["weight_version"]


def release_folder(state: Path, content_id: str, cache: Path) -> Path:
    """The committed release's weights, materialised from the artifact store."""
    content = content_store(state)
    folder = weights_folder(materialise_cached(content.store, content.load(content_id), cache))
    assert folder is not None, content_id
    return folder


@pytest.mark.slow
def test_a_release_trained_from_a_report_is_broadcast_to_both_engines_and_served(
    engines: list[EngineProcess], tmp_path: Path
) -> None:
    before = [served(e.url)[0] for e in engines]
    with deployment(engines, tmp_path) as reef:
        _, receipt, creation = reef.ask()  # creates the scenario
        # both sidecars follow the chain (they load the creation release, the engines'
        # base weights, from disk) before the report that trains the candidate is sent:
        # a head already committed when a sidecar starts is loaded from disk, not awaited
        base = reef.wait("both engines on the creation release", lambda: reef.loaded(creation), 60)
        assert [e.method for e in base] == ["disk", "disk"]
        reef.report(receipt, "hello")
        release: ReleaseCommitted = reef.wait(
            "the trained release", lambda: reef.committed_on(creation), 120
        )
        (sample,) = reef.samples()
        assert sample.references == [receipt]
        assert (release.operation, release.sample_ids) == ("training", [sample.event_id])
        recorded = reef.wait("both engines on it", lambda: reef.loaded(release.release_id), 60)
        assert [(e.method, e.weight_version) for e in recorded] == [
            ("broadcast", release.release_id)
        ] * 2
        assert reef.publishes() == {"ok": 1, "failed": 0, "skipped": 0}
        answer, _, served_by = reef.ask()  # engine 0, through Reef
        assert served_by == release.release_id
        assert chat(engines[1]) == (answer, release.release_id)
    pushed = [served(e.url) for e in engines]
    assert pushed[0] == pushed[1] and pushed[0][1] == release.release_id
    assert pushed[0][0] != before[0]
    folder = release_folder(tmp_path / "state", release.content_id, tmp_path / "cache")
    assert disk_fingerprint(engines[0], folder, "trained-disk") == pushed[0][0]


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
    publisher = Publisher(PublishConfig("broadcast", (DEAD_ENGINE,), "cpu", timeout_s=1.0))
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
