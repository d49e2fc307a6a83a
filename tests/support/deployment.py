"""A deployment seen from the test: one ``reef serve``, its API, its log and its artifact
store (the release and operations end-to-end tests).

:class:`Deployment` talks to the API with the deployment's admin or read token, reads
and appends events on its log (``new_log`` opens a fresh reader/writer each time), and
proposes releases as a trainer would, waiting for the release chain's decision.
"""

from __future__ import annotations

import abc
import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from reef.artifacts import materialise
from reef.artifacts.content import ContentStore
from reef.core.events import Event, ReleaseProposed, utc_now
from reef.core.ids import release_id
from reef.log.base import EventLog
from reef.services.eventstore import EventStore, StoredEvent
from reef.testing.servers import ReefProcess, run_reef
from reef.wiring import readable_store
from tests.support.api import chat_body, unique_scenario


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def tree_files(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """The files under ``root`` as {relative path: bytes} (``skip``: top-level names)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in skip or not path.is_file():
            continue
        found[rel] = path.read_bytes()
    return found


class ReleaseChainClient(abc.ABC):
    """A scenario's release chain seen through the API, with releases proposed on the log
    as a trainer would; what the subclass gives: :meth:`client`, :meth:`append`,
    ``content``, ``decide_timeout`` and :meth:`alive`."""

    #: how often :meth:`wait_release` reads the chain again
    POLL_S: ClassVar[float] = 0.1
    content: ContentStore
    decide_timeout: float

    @abc.abstractmethod
    def client(
        self, token: str | None = "", scenario: str | None = None, timeout: float = 60.0
    ) -> httpx.Client:
        """``token=""``: the admin token; None: no Authorization header."""

    @abc.abstractmethod
    def append(self, *events: Event) -> None:
        """Append ``events`` to the deployment's log."""

    @abc.abstractmethod
    def alive(self) -> None:
        """Fails when the deployment stopped (checked while waiting)."""

    def create_scenario(self, prefix: str) -> str:
        name = unique_scenario(prefix)
        with self.client() as client:
            response = client.post("/reef/scenarios", json={"name": name})
        assert response.status_code == 201, response.text
        return name

    def releases(self, scenario: str) -> list[dict[str, Any]]:
        with self.client() as client:
            response = client.get(f"/reef/scenarios/{scenario}/releases")
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()["releases"]
        return found

    def head(self, scenario: str) -> dict[str, Any]:
        (current,) = [r for r in self.releases(scenario) if r["current"]]
        return current

    def wait_release(self, scenario: str, wanted: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.decide_timeout
        while True:
            for release in self.releases(scenario):
                if release["release_id"] == wanted:
                    return release
            self.alive()
            assert time.monotonic() < deadline, f"release {wanted} not committed in time"
            time.sleep(self.POLL_S)

    def propose(
        self,
        scenario: str,
        content_id: str,
        sample_ids: Sequence[str] = (),
        *,
        parent: str,
        pending: bool = False,
    ) -> str:
        """Append ReleaseProposed on ``parent`` as a trainer would; its proposal id.

        Nothing is waited for (a stale ``parent`` is rejected by the chain)."""
        proposal_id = uuid.uuid4().hex
        self.append(
            ReleaseProposed(
                event_id=proposal_id,
                scenario=scenario,
                occurred_at=utc_now(),
                producer="test-trainer",
                proposal_id=proposal_id,
                parent_release_id=parent,
                content_id=content_id,
                operation="training",
                metrics_json=json.dumps({"reward": 0.5}),
                sample_ids=list(sample_ids),
                pending=pending,
            )
        )
        return proposal_id

    def propose_training(
        self,
        scenario: str,
        content_id: str,
        sample_ids: Sequence[str] = (),
        *,
        pending: bool = False,
    ) -> dict[str, Any]:
        """Propose on the current head as a trainer would; the commit, once decided."""
        parent = self.head(scenario)["release_id"]
        self.propose(scenario, content_id, sample_ids, parent=parent, pending=pending)
        expected = release_id(scenario, parent, content_id, "training")
        release = self.wait_release(scenario, expected)
        assert release["parent_release_id"] == parent
        assert release["content_id"] == content_id
        assert release["operation"] == "training"
        assert release["pending"] is pending
        assert release["current"] is not pending
        return release

    def republish(self, scenario: str, operation: str, release_id: str) -> httpx.Response:
        with self.client(timeout=self.decide_timeout + 30) as client:
            return client.post(
                f"/reef/scenarios/{scenario}/{operation}", json={"release_id": release_id}
            )

    def materialise(self, content_id: str, dest: Path) -> dict[str, bytes]:
        """The release tree written out by :func:`materialise`, as {path: bytes}."""
        materialise(self.content.store, self.content.load(content_id), dest)
        return tree_files(dest)


@dataclass
class Deployment(ReleaseChainClient):
    name: str
    process: ReefProcess
    admin_token: str
    read_token: str
    content: ContentStore
    new_log: Callable[[], EventLog]
    #: the flags every CLI command needs to find this deployment's log
    log_flags: list[str] = field(default_factory=list)
    #: how long a proposal may take to be decided (the chain runs elsewhere on Kafka)
    decide_timeout: float = 30.0

    @property
    def base_url(self) -> str:
        return self.process.base_url

    @property
    def state_dir(self) -> Path:
        return self.process.state_dir

    def client(
        self, token: str | None = "", scenario: str | None = None, timeout: float = 60.0
    ) -> httpx.Client:
        """``token=""``: the admin token; None: no Authorization header."""
        chosen = self.admin_token if token == "" else token
        headers = {"Authorization": f"Bearer {chosen}"} if chosen is not None else {}
        if scenario is not None:
            headers["x-reef-scenario"] = scenario
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def alive(self) -> None:
        assert self.process.managed.running(), f"reef serve died\n{self.process.output()}"

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``reef <args>`` on this deployment's log."""
        return run_reef(*args, *self.log_flags, env=env)

    # -- the log ---------------------------------------------------------------

    def stored(self, topic: str, raw: bool = False) -> list[StoredEvent]:
        """The topic's events; sealed bodies opened unless ``raw`` (as stored)."""

        async def read() -> list[StoredEvent]:
            log = self.new_log()
            await log.start()
            try:
                async with readable_store(log, self.process.claims()) as store:
                    return [s async for s in store.read(topic, raw=raw)]
            finally:
                await log.close()

        found: list[StoredEvent] = _run(read())
        assert all(s.event is not None for s in found), [s.error for s in found if s.error]
        return found

    def events(self, topic: str) -> list[Event]:
        return [s.event for s in self.stored(topic) if s.event is not None]

    def append(self, *events: Event) -> None:
        async def write() -> None:
            log = self.new_log()
            await log.start()
            try:
                await EventStore(log).append_all(list(events))
            finally:
                await log.close()

        _run(write())

    # -- inference and reports --------------------------------------------------

    def infer(self, scenario: str, text: str) -> str:
        """One chat completion in ``scenario``; its receipt."""
        with self.client(scenario=scenario) as client:
            response = client.post("/v1/chat/completions", json=chat_body(text))
        assert response.status_code == 200, response.text
        receipt: str = response.headers["x-reef-agent-record-id"]
        return receipt

    def report(self, scenario: str, references: list[str], score: float = 1.0) -> str:
        body = {"score": score, "feedback": {"note": "ops"}, "references": references}
        with self.client(scenario=scenario) as client:
            response = client.post("/reef/report", json=body)
        assert response.status_code == 200, response.text
        report_id: str = response.json()["agent_record_id"]
        return report_id

    def fate(self, scenario: str, report_id: str) -> dict[str, Any]:
        with self.client(self.read_token, scenario=scenario) as client:
            response = client.get(f"/reef/reports/{report_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_fates(self, reports: dict[str, str]) -> dict[str, dict[str, Any]]:
        """{report id: scenario} → {report id: fate}, once none is pending."""
        deadline = time.monotonic() + self.decide_timeout
        while True:
            fates = {rid: self.fate(scenario, rid) for rid, scenario in reports.items()}
            if all(f["status"] != "pending" for f in fates.values()):
                return fates
            self.alive()
            assert time.monotonic() < deadline, f"fates not decided in time: {fates}"
            time.sleep(0.2)

    # -- releases ----------------------------------------------------------------

    def rollback(self, scenario: str, target: str) -> dict[str, Any]:
        with self.client() as client:
            response = client.post(
                f"/reef/scenarios/{scenario}/rollback", json={"release_id": target}
            )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body
