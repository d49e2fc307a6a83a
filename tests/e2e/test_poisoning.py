"""Poisoning controls end to end (docs/security.md "Poisoning controls"): the batching
rules, in the trainer a real ``reef serve`` runs. The report rate limits are
tests/api/test_report_rate_limits.py (the same app, in process).

Batching rules, embedded log: ``reef serve`` runs the torch-free test recipe
(tests/support/fake_recipe.py) in its in-process trainer with ``batch_size: 3,
max_per_reporter: 1, min_distinct_reporters: 2, max_wait_s: 1``. One token floods three
reports: no batch trains, not even a partial one after ``max_wait_s`` (without the
minimum, its oldest sample would). Each further reporter releases exactly one batch of
one sample of the flooder and one of its own (without the cap, the first would be a
full batch of two flood samples and the new one); the flooder's other samples wait
(not dropped, never trained twice). The reporter comes from the token, whatever the
body claims.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reef.core.events import ReleaseCommitted, SampleJoined
from reef.core.topics import RELEASES, SAMPLES
from reef.testing.servers import UpstreamProcess
from tests.support.api import chat_body, unique_scenario
from tests.support.reef_server import ReefServer, launch


def principal_name(token: str) -> str:
    """The reporter Reef records for a token (its digest prefix, never the token)."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------
# Batching: a flooding reporter is capped and held until enough reporters


FLOODER, SECOND, THIRD = (f"reef-reporter-{n}-{secrets.token_hex(6)}" for n in range(3))
MAX_WAIT_S = 1.0


@pytest.fixture(scope="module")
def training_server(
    upstream: UpstreamProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReefServer]:
    folder = tmp_path_factory.mktemp("poisoning-recipe")
    config = folder / "recipe.yaml"
    config.write_text(
        "recipe:\n"
        f"  batching: {{batch_size: 3, max_per_reporter: 1, min_distinct_reporters: 2,"
        f" max_wait_s: {MAX_WAIT_S}}}\n"
        "  eligibility: {max_staleness: 1000}\n"
    )
    server = launch(
        "embedded",
        upstream=upstream,
        state_dir=folder / "state",
        tokens=f"{FLOODER}:inference+report,{SECOND}:report,{THIRD}:report",
        env={
            "REEF_RECIPE": "tests.support.fake_recipe:FakeRecipe",
            "REEF_RECIPE_CONFIG": str(config),
        },
    )
    try:
        yield server
    finally:
        server.stop()


def infer(server: ReefServer, scenario: str, text: str) -> str:
    with server.client(scenario, token=FLOODER) as client:
        answer = client.post("/v1/chat/completions", json=chat_body(text))
    assert answer.status_code == 200, answer.text
    receipt: str = answer.headers["x-reef-agent-record-id"]
    return receipt


def report(server: ReefServer, token: str, scenario: str, receipt: str) -> str:
    body = {"score": 1.0, "feedback": {"correction": "hi"}, "references": [receipt]}
    with server.client(scenario, token=token) as client:
        answer = client.post("/reef/report", json=body)
    assert answer.status_code == 200, answer.text
    report_id: str = answer.json()["agent_record_id"]
    return report_id


def poll(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy (generous: the CI has 2 cores)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def samples_of(server: ReefServer, scenario: str) -> dict[str, SampleJoined]:
    """Samples by report id."""
    return {e.report_id: e for e in server.events(SAMPLES, scenario) if isinstance(e, SampleJoined)}


def trainings(server: ReefServer, scenario: str) -> list[ReleaseCommitted]:
    return [
        e
        for e in server.events(RELEASES, scenario)
        if isinstance(e, ReleaseCommitted) and e.operation == "training"
    ]


def trainer_status(server: ReefServer) -> dict[str, Any]:
    with server.client() as client:
        answer = client.get("/reef/status")
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()["trainer"]
    return status


def held(server: ReefServer, read: int, pending: int) -> dict[str, Any]:
    """The trainer's status once it read ``read`` samples and holds ``pending``."""

    def settled() -> dict[str, Any] | None:
        status = trainer_status(server)
        done = status["samples_read"] >= read and status["samples_pending"] == pending
        return status if done else None

    found: dict[str, Any] = poll(f"trainer to read {read}, hold {pending}", settled)
    return found


def test_a_flooding_reporter_is_capped_and_held_until_other_reporters_come(
    training_server: ReefServer,
) -> None:
    server = training_server
    scenario = unique_scenario("flood")
    flood = [report(server, FLOODER, scenario, infer(server, scenario, f"f{n}")) for n in range(3)]
    samples = poll("3 samples", lambda: (s := samples_of(server, scenario)) and len(s) == 3 and s)
    assert {s.reporter for s in samples.values()} == {principal_name(FLOODER)}

    # one reporter alone, however many reports: nothing trains, nothing is dropped; the
    # window lets the trainer try a partial batch (every MAX_WAIT_S idle) a few times
    held(server, read=3, pending=3)
    time.sleep(4 * MAX_WAIT_S)
    status = held(server, read=3, pending=3)
    assert status["batches"] == 0 and not status["samples_skipped"], status
    assert trainings(server, scenario) == []

    second = report(server, SECOND, scenario, infer(server, scenario, "s0"))
    (first,) = poll("the first training release", lambda: trainings(server, scenario))
    samples = samples_of(server, scenario)
    assert samples[second].reporter == principal_name(SECOND)
    # a partial batch of the oldest flood sample and the new reporter's: one sample each
    # (max_per_reporter 1 keeps the second flood sample out of the third place)
    assert sorted(first.sample_ids) == sorted(
        [samples[flood[0]].event_id, samples[second].event_id]
    )
    status = held(server, read=4, pending=2)  # the rest of the flood waits
    assert status["batches"] == 1, status
    assert len(trainings(server, scenario)) == 1

    third = report(server, THIRD, scenario, infer(server, scenario, "t0"))
    releases = poll("the second training release", lambda: trainings(server, scenario)[1:])
    assert sorted(releases[0].sample_ids) == sorted(
        [samples[flood[1]].event_id, samples_of(server, scenario)[third].event_id]
    )
    held(server, read=5, pending=1)
    consumed = [sid for release in trainings(server, scenario) for sid in release.sample_ids]
    assert len(consumed) == len(set(consumed)) == 4  # no sample trained twice
    assert samples[flood[2]].event_id not in consumed  # still waiting for a new reporter
