"""Poisoning controls end to end (docs/security.md "Poisoning controls").

Rate limits, on both logs: a real ``reef serve`` with report limits per token (set by
flags) and per scenario (set by environment), slow enough (one report per 50 s) that no
bucket refills during a test. Over a limit: 429 ``rate_limited`` with ``Retry-After``,
and the log's end offsets do not move. Tokens and scenarios are limited independently.

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

import httpx
import pytest

from reef.core.events import ReleaseCommitted, ReportSubmitted, SampleJoined
from reef.core.topics import RELEASES, REPORTS, SAMPLES
from reef.testing.servers import UpstreamProcess
from tests.support.api import assert_reef_error, chat_body, unique_scenario
from tests.support.reef_server import ReefServer, launch

RATE = 0.02  # one report per 50 s: no refill within a test
TOKEN_BURST = 2
SCENARIO_BURST = 4
LIMITED = [f"reef-limited-{n}-{secrets.token_hex(6)}" for n in range(6)]


def principal_name(token: str) -> str:
    """The reporter Reef records for a token (its digest prefix, never the token)."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    return {
        "tokens": ",".join(f"{t}:report+read" for t in LIMITED),
        "args": [
            "--report-rate-per-token",
            str(RATE),
            "--report-burst-per-token",
            str(TOKEN_BURST),
        ],
        "env": {
            "REEF_REPORT_RATE_PER_SCENARIO": str(RATE),
            "REEF_REPORT_BURST_PER_SCENARIO": str(SCENARIO_BURST),
        },
    }


def send(server: ReefServer, token: str, scenario: str, **extra: Any) -> httpx.Response:
    body = {"score": 1.0, "feedback": "ok", "references": [], **extra}
    with server.client(scenario, token=token) as client:
        return client.post("/reef/report", json=body)


def assert_limited(response: httpx.Response, limit: str) -> int:
    body = assert_reef_error(response, 429)
    assert body["error"]["code"] == "rate_limited", body
    assert limit in body["error"]["message"], body
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 1 / RATE, retry_after
    return retry_after


def test_a_token_over_its_rate_gets_429_and_writes_nothing(reef_server: ReefServer) -> None:
    flooder, other = LIMITED[0], LIMITED[1]
    scenario = unique_scenario("limit-token")
    for _ in range(TOKEN_BURST):
        assert send(reef_server, flooder, scenario).status_code == 200
    before = reef_server.end_offsets()
    refused_id = f"refused-{secrets.token_hex(6)}"
    assert_limited(send(reef_server, flooder, scenario, agent_record_id=refused_id), "token")
    # the token's limit spans scenarios
    assert_limited(send(reef_server, flooder, unique_scenario("limit-token")), "token")
    reef_server.assert_nothing_written(before)
    with reef_server.client(scenario, token=flooder) as client:
        assert_reef_error(client.get(f"/reef/reports/{refused_id}"), 404)
    # another token on the same scenario is not affected
    answer = send(reef_server, other, scenario)
    assert answer.status_code == 200, answer.text
    reports = reef_server.events(REPORTS, scenario)
    assert len(reports) == TOKEN_BURST + 1
    assert refused_id not in {e.event_id for e in reports}


def test_a_scenario_over_its_rate_gets_429_for_every_token(reef_server: ReefServer) -> None:
    busy, quiet = unique_scenario("limit-busy"), unique_scenario("limit-quiet")
    for token in LIMITED[2:4]:
        for _ in range(SCENARIO_BURST // 2):
            answer = send(reef_server, token, busy)
            assert answer.status_code == 200, answer.text
    before = reef_server.end_offsets()
    late = LIMITED[4]  # a fresh token: its own bucket is full, the scenario's is empty
    assert_limited(send(reef_server, late, busy), "scenario")
    reef_server.assert_nothing_written(before)
    # another scenario is not affected, and the refusal cost the token nothing
    for _ in range(TOKEN_BURST):
        answer = send(reef_server, late, quiet)
        assert answer.status_code == 200, answer.text
    assert len(reef_server.events(REPORTS, busy)) == SCENARIO_BURST
    assert len(reef_server.events(REPORTS, quiet)) == TOKEN_BURST


def test_the_reporter_is_the_token_not_what_the_body_claims(reef_server: ReefServer) -> None:
    token = LIMITED[5]
    scenario = unique_scenario("limit-reporter")
    answer = send(reef_server, token, scenario, reporter="someone-else")
    assert answer.status_code == 200, answer.text
    (event,) = reef_server.wait_for(REPORTS, scenario)
    assert isinstance(event, ReportSubmitted)
    assert event.reporter == principal_name(token)
    assert token not in reef_server.raw_log_bytes().decode(errors="replace")


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
