"""The sidecar test harness: a ``reef serve`` state dir's log and artifact store seen
from the test (events, publishing and proposing releases, waiting for commits), Reef's
API as the sidecar tests use it, and engine processes started on a chosen port.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from reef.artifacts import ClaimCheck, LocalArtifactStore, open_store
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import (
    EngineLoaded,
    EngineLoadFailed,
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    utc_now,
)
from reef.log import running
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import EventStore
from reef.settings import Settings
from reef.testing.servers import (
    HOST,
    ManagedProcess,
    ReefProcess,
    clean_env,
    reef_executable,
    spawn,
)
from reef.wiring import readable_store
from tests.support.engine import PROMPT, wait_healthy

TOKEN = "reef-sidecar-test-token"
MAX_TOKENS = 16


@dataclass(frozen=True)
class Fingerprint:
    """The greedy chat output of one weight set for :data:`PROMPT`."""

    ids: tuple[int, ...]
    text: str


def chat_body(stream: bool, max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "logprobs": True,
        "stream": stream,
    }


# ---------------------------------------------------------------------------
# The log and the artifact store, as a trainer beside ``reef serve`` sees them


def _log(state_dir: Path) -> EmbeddedLog:
    return EmbeddedLog(state_dir / "log.sqlite3")


def append(state_dir: Path, event: Event) -> None:
    async def write() -> None:
        async with running(_log(state_dir)) as log:
            await EventStore(log).append(event)

    asyncio.run(write())


def events(state_dir: Path, topic: str, scenario: str) -> list[Event]:
    async def read() -> list[Event]:
        log = _log(state_dir)
        try:
            found = []
            # bodies opened (those stored as blocks assembled from the artifact store)
            settings = Settings.of(state_dir=state_dir)
            claims = ClaimCheck(open_store(settings), settings.artifacts.claim_check_bytes)
            async with readable_store(log, claims) as store:
                async for stored in store.read(topic, scenario=scenario):
                    assert stored.event is not None, f"undecodable record: {stored.error}"
                    found.append(stored.event)
            return found
        finally:
            await log.close()

    result: list[Event] = asyncio.run(read())
    return result


def engine_events(state_dir: Path, scenario: str) -> list[Event]:
    return events(state_dir, topics.ENGINE, scenario)


def loaded(state_dir: Path, scenario: str, release: str) -> list[EngineLoaded]:
    return [
        e
        for e in engine_events(state_dir, scenario)
        if isinstance(e, EngineLoaded) and e.release_id == release
    ]


def failed(state_dir: Path, scenario: str, release: str) -> list[EngineLoadFailed]:
    return [
        e
        for e in engine_events(state_dir, scenario)
        if isinstance(e, EngineLoadFailed) and e.release_id == release
    ]


def content_store(state_dir: Path) -> ContentStore:
    return ContentStore(LocalArtifactStore.in_state_dir(state_dir))


def publish(state_dir: Path, folder: Path) -> str:
    return content_store(state_dir).publish_dir(folder)


def head_of_folder(state_dir: Path, scenario: str, folder: Path) -> ReleaseCommitted:
    """``folder`` published and committed as ``scenario``'s head, as the chain would
    commit it (ids named after the state dir); the caller appends it."""
    return ReleaseCommitted(
        event_id=f"commit-{state_dir.name}",
        scenario=scenario,
        occurred_at=utc_now(),
        producer="test-chain",
        release_id=f"release-{state_dir.name}",
        proposal_id=f"proposal-{state_dir.name}",
        content_id=publish(state_dir, folder),
        operation="training",
    )


def propose(
    state_dir: Path, scenario: str, parent: str, content_id: str, *, pending: bool = False
) -> str:
    """Append a training proposal on ``parent`` (``pending``: to be held); its id."""
    proposal = uuid.uuid4().hex
    append(
        state_dir,
        ReleaseProposed(
            event_id=f"proposal-{proposal}",
            scenario=scenario,
            occurred_at=utc_now(),
            producer="sidecar-test-trainer",
            proposal_id=proposal,
            content_id=content_id,
            operation="training",
            parent_release_id=parent,
            pending=pending,
        ),
    )
    return proposal


def wait_until(
    what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.2
) -> Any:
    """Poll ``check`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def committed(
    state_dir: Path, scenario: str, proposal: str, timeout: float = 30.0, *, pending: bool = False
) -> str:
    """The release id the chain committed for ``proposal`` (fails on a rejection)."""

    def decided() -> Event | None:
        for event in events(state_dir, topics.RELEASES, scenario):
            if isinstance(event, ReleaseCommitted | ReleaseRejected) and (
                event.proposal_id == proposal
            ):
                return event
        return None

    decision = wait_until(f"the chain to decide {proposal}", decided, timeout)
    assert isinstance(decision, ReleaseCommitted), decision
    assert decision.pending is pending
    return decision.release_id


def release(state_dir: Path, scenario: str, parent: str, folder: Path) -> str:
    """Publish ``folder`` and propose it on ``parent``; the committed release id."""
    content_id = publish(state_dir, folder)
    return committed(state_dir, scenario, propose(state_dir, scenario, parent, content_id))


# ---------------------------------------------------------------------------
# Reef's API


def reef_client(reef: ReefProcess, timeout: float = 60.0) -> httpx.Client:
    return httpx.Client(
        base_url=reef.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=timeout
    )


def create_scenario(reef: ReefProcess, scenario: str) -> str:
    """Create the scenario; its creation (base) release id."""
    with reef_client(reef) as client:
        response = client.post("/reef/scenarios", json={"name": scenario})
    assert response.status_code == 201, response.text
    head: str = response.json()["release_id"]
    return head


def known_to_api(reef: ReefProcess, scenario: str, release_id: str) -> str:
    """``release_id`` once the API's projection lists it in ``scenario``'s chain.

    A test that learns of a commit by reading the log itself is ahead of the API's
    projection, which folds the same record a moment later."""

    def listed() -> bool:
        with reef_client(reef) as client:
            response = client.get(f"/reef/scenarios/{scenario}/releases")
        assert response.status_code == 200, response.text
        return any(r["release_id"] == release_id for r in response.json()["releases"])

    wait_until(f"the API to list {release_id}", listed, 30)
    return release_id


def scenario_status(reef: ReefProcess, scenario: str) -> dict[str, Any]:
    with reef_client(reef) as client:
        response = client.get("/reef/status")
    response.raise_for_status()
    found: dict[str, Any] = response.json()["scenarios"].get(scenario, {})
    return found


def head_of(reef: ReefProcess, scenario: str) -> str:
    with reef_client(reef) as client:
        response = client.get(f"/reef/scenarios/{scenario}/releases")
    response.raise_for_status()
    (current,) = [r for r in response.json()["releases"] if r["current"]]
    head: str = current["release_id"]
    return head


def wait_engine_on(
    reef: ReefProcess, scenario: str, engine_id: str, release_id: str, timeout: float = 90.0
) -> None:
    """Until GET /reef/status shows ``engine_id`` on ``release_id`` (from EngineLoaded)."""

    def on_it() -> bool:
        engine = scenario_status(reef, scenario).get("engines", {}).get(engine_id, {})
        return bool(engine.get("release_id") == release_id)

    try:
        wait_until(f"engine {engine_id} on {release_id}", on_it, timeout, every=0.25)
    except AssertionError:
        raise AssertionError(f"{scenario_status(reef, scenario)}\n{reef.output()}") from None
    engine = scenario_status(reef, scenario)["engines"][engine_id]
    assert engine["weight_version"] == release_id, engine


@dataclass
class Engine:
    url: str
    managed: ManagedProcess

    def info(self) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/get_model_info", timeout=10.0)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def chat(self) -> Fingerprint:
        response = httpx.post(f"{self.url}/v1/chat/completions", json=chat_body(False), timeout=60)
        response.raise_for_status()
        body = response.json()
        return Fingerprint(
            tuple(body["meta_info"]["output_ids"]), body["choices"][0]["message"]["content"]
        )


def start_engine_on(port: int, log_dir: Path, name: str, timeout: float = 120.0) -> Engine:
    """``reef engine --model tiny`` on ``port``, once ``/health`` answers."""
    argv = [reef_executable(), "engine", "--model", "tiny", "--host", HOST, "--port", str(port)]
    managed = spawn(argv, env=clean_env(), log_dir=log_dir, name=name)
    url = f"http://{HOST}:{port}"
    wait_healthy(managed, url, timeout)
    return Engine(url, managed)
