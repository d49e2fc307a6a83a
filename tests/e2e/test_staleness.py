"""The staleness limit, seen through the HTTP API: samples served by a release too far
behind the head are not trained, and GET /reef/status counts them.

``reef serve`` (embedded log, scripted upstream, the in-process trainer) with a
torch-free recipe (tests/support/fake_recipe.py) that trains batches of two. Exchanges
are recorded while the creation release ``r0`` is the head (each answer names the
release that served it in ``x-reef-release-id``); then a rollback to ``r0`` makes a new
head ``r1`` (one release ahead: the staleness of those exchanges is now 1), and more
exchanges are recorded under ``r1``. Reports on them come after:

* ``max_staleness: 0``: the reports on ``r0``'s exchanges are accepted by the join but
  never trained (their fate stays ``accepted``), the trainer counts them as stale in
  GET /reef/status; ``r1``'s exchanges are trained into the next release.
* ``max_staleness: 1``: ``r0``'s exchanges (1 behind) are trained; once that release
  ``r2`` is the head, later reports on ``r0``'s exchanges (2 behind) are stale, and
  ``r1``'s (1 behind) are still trained.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.testing.servers import ReefProcess, UpstreamProcess, running_reef
from tests.support.api import chat_body, unique_scenario

pytestmark = pytest.mark.slow

RECIPE = "tests.support.fake_recipe:FakeRecipe"
TOKEN = "reef-staleness-token"
BATCH = 2
WAIT_S = 60.0


@dataclass
class Api:
    """The deployment's HTTP API, for one scenario."""

    reef: ReefProcess
    scenario: str

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": self.scenario}
        return httpx.Client(base_url=self.reef.base_url, headers=headers, timeout=30.0)

    def create(self) -> str:
        """Create the scenario; its creation release's id."""
        with self.client() as client:
            response = client.post("/reef/scenarios", json={"name": self.scenario})
        assert response.status_code == 201, response.text
        (head,) = [r for r in self.releases() if r["current"]]
        assert head["operation"] == "creation"
        release_id: str = head["release_id"]
        return release_id

    def releases(self) -> list[dict[str, Any]]:
        with self.client() as client:
            response = client.get(f"/reef/scenarios/{self.scenario}/releases")
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()["releases"]
        return found

    def rollback(self, release_id: str) -> dict[str, Any]:
        with self.client() as client:
            response = client.post(
                f"/reef/scenarios/{self.scenario}/rollback", json={"release_id": release_id}
            )
        assert response.status_code == 200, response.text
        new: dict[str, Any] = response.json()
        return new

    def exchanges(self, count: int, served_by: str) -> list[str]:
        """Record ``count`` exchanges; their receipts (each served by ``served_by``)."""
        receipts = []
        with self.client() as client:
            for _ in range(count):
                answer = client.post("/v1/chat/completions", json=chat_body("Say something."))
                assert answer.status_code == 200, answer.text
                assert answer.headers["x-reef-release-id"] == served_by
                receipts.append(answer.headers["x-reef-agent-record-id"])
        return receipts

    def report(self, receipts: list[str]) -> list[str]:
        """One report per receipt; the report ids."""
        ids = []
        with self.client() as client:
            for receipt in receipts:
                body = {"score": 1.0, "feedback": "fine", "references": [receipt]}
                response = client.post("/reef/report", json=body)
                assert response.status_code == 200, response.text
                ids.append(response.json()["agent_record_id"])
        return ids

    def fates(self, report_ids: list[str]) -> list[dict[str, Any]]:
        with self.client() as client:
            answers = [client.get(f"/reef/reports/{r}") for r in report_ids]
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        return [a.json() for a in answers]

    def trainer(self) -> dict[str, Any]:
        """The in-process trainer's status, as GET /reef/status shows it."""
        with self.client() as client:
            response = client.get("/reef/status")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()["trainer"]
        return found

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not check():
            assert self.reef.managed.running(), self.reef.output()
            assert time.monotonic() < deadline, (
                f"{what}: not within {WAIT_S:.0f}s\ntrainer: {self.trainer()}\n"
                + self.reef.output()
            )
            time.sleep(0.2)

    def wait_consumed(self, report_ids: list[str]) -> str:
        """Wait until every report was trained into one release; its id."""

        def consumed() -> bool:
            return all(f["status"] == "consumed" for f in self.fates(report_ids))

        self.wait(f"reports {report_ids} consumed", consumed)
        (release_id,) = {f["release_id"] for f in self.fates(report_ids)}
        assert isinstance(release_id, str)
        return release_id

    def wait_stale(self, total: int) -> None:
        self.wait(
            f"{total} samples skipped as stale",
            lambda: self.trainer()["samples_skipped_stale"] >= total,
        )


@pytest.fixture
def deploy(tmp_path: Path, upstream: UpstreamProcess) -> Iterator[Callable[[int], Api]]:
    """``deploy(max_staleness)``: reef serve with the in-process trainer, one scenario."""
    with contextlib.ExitStack() as stack:

        def start(max_staleness: int) -> Api:
            config = tmp_path / f"recipe-{max_staleness}.yaml"
            config.write_text(
                f"recipe:\n  batching: {{batch_size: {BATCH}}}\n"
                f"  eligibility: {{max_staleness: {max_staleness}}}\n"
            )
            env = {"REEF_TOKEN": TOKEN, "REEF_RECIPE": RECIPE, "REEF_RECIPE_CONFIG": str(config)}
            reef = stack.enter_context(
                running_reef(
                    ["--upstream-url", upstream.v1_url],
                    env=env,
                    state_dir=tmp_path / f"state-{max_staleness}",
                    timeout=120.0,
                    name="staleness",
                )
            )
            return Api(reef, unique_scenario("stale"))

        yield start


def release(api: Api, release_id: str) -> dict[str, Any]:
    (found,) = [r for r in api.releases() if r["release_id"] == release_id]
    return found


def stale_rejections(api: Api) -> list[dict[str, Any]]:
    return [
        r
        for r in api.trainer()["recent_rejections"]
        if r["scenario"] == api.scenario and r["reason"] == "stale"
    ]


def test_limit_zero_excludes_samples_served_by_an_older_release(
    deploy: Callable[[int], Api],
) -> None:
    api = deploy(0)
    r0 = api.create()
    old = api.exchanges(BATCH, served_by=r0)
    r1 = api.rollback(r0)["release_id"]
    fresh = api.exchanges(BATCH, served_by=r1)

    old_reports = api.report(old)  # served by r0, one release behind the head r1
    api.wait_stale(BATCH)
    fresh_reports = api.report(fresh)
    r2 = api.wait_consumed(fresh_reports)

    trained = release(api, r2)
    assert (trained["operation"], trained["parent_release_id"], trained["current"]) == (
        "training",
        r1,
        True,
    )
    assert [f["status"] for f in api.fates(old_reports)] == ["accepted"] * BATCH
    status = api.trainer()
    assert status["samples_skipped_stale"] == BATCH
    assert status["samples_skipped"] == {"stale": BATCH}
    assert status["candidates"]["accepted"] == 1
    assert len(stale_rejections(api)) == BATCH
    assert [r["operation"] for r in api.releases()] == ["training", "rollback", "creation"]


def test_limit_k_admits_samples_up_to_k_releases_behind(deploy: Callable[[int], Api]) -> None:
    api = deploy(1)
    r0 = api.create()
    old = api.exchanges(BATCH, served_by=r0)
    older = api.exchanges(BATCH, served_by=r0)  # reported only once r0 is 2 behind
    r1 = api.rollback(r0)["release_id"]
    fresh = api.exchanges(BATCH, served_by=r1)

    old_reports = api.report(old)  # 1 behind the head r1: admitted
    r2 = api.wait_consumed(old_reports)
    assert release(api, r2)["parent_release_id"] == r1
    assert api.trainer()["samples_skipped_stale"] == 0

    older_reports = api.report(older)  # 2 behind the head r2: stale
    api.wait_stale(BATCH)
    fresh_reports = api.report(fresh)  # 1 behind the head r2: admitted
    r3 = api.wait_consumed(fresh_reports)

    assert release(api, r3)["parent_release_id"] == r2
    assert release(api, r3)["current"] is True
    assert [f["status"] for f in api.fates(older_reports)] == ["accepted"] * BATCH
    status = api.trainer()
    assert status["samples_skipped_stale"] == BATCH
    assert status["samples_skipped"] == {"stale": BATCH}
    assert status["candidates"]["accepted"] == 2
    assert len(stale_rejections(api)) == BATCH
    ops = [r["operation"] for r in api.releases()]
    assert ops == ["training", "training", "rollback", "creation"]
