"""Report rate limits (docs/security.md "Poisoning controls"), through the app ``reef
serve`` builds, in process (tests/support/embedded_app.py): report limits per token (set
by flags) and per scenario (set by environment), slow enough (one report per 50 s) that
no bucket refills during a test. Over a limit: 429 ``rate_limited`` with
``Retry-After``, and the log's end offsets do not move. Tokens and scenarios are limited
independently. The batching rules, which need the trainer of a ``reef serve``, are
tests/e2e/test_poisoning.py.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import httpx
import pytest

from reef.core.events import ReportSubmitted
from reef.core.topics import REPORTS
from tests.support.api import assert_reef_error, unique_scenario
from tests.support.embedded_app import EmbeddedApp

RATE = 0.02  # one report per 50 s: no refill within a test
TOKEN_BURST = 2
SCENARIO_BURST = 4
LIMITED = [f"reef-limited-{n}-{secrets.token_hex(6)}" for n in range(6)]


def principal_name(token: str) -> str:
    """The reporter Reef records for a token (its digest prefix, never the token)."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def app_options() -> dict[str, Any]:
    return {
        "tokens": ",".join(f"{t}:report+read" for t in LIMITED),
        "flags": {"report_rate_per_token": RATE, "report_burst_per_token": TOKEN_BURST},
        "env": {
            "REEF_REPORT_RATE_PER_SCENARIO": str(RATE),
            "REEF_REPORT_BURST_PER_SCENARIO": str(SCENARIO_BURST),
        },
    }


def send(app: EmbeddedApp, token: str, scenario: str, **extra: Any) -> httpx.Response:
    body = {"score": 1.0, "feedback": "ok", "references": [], **extra}
    with app.client(scenario, token=token) as client:
        return client.post("/reef/report", json=body)


def assert_limited(response: httpx.Response, limit: str) -> int:
    body = assert_reef_error(response, 429)
    assert body["error"]["code"] == "rate_limited", body
    assert limit in body["error"]["message"], body
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 1 / RATE, retry_after
    return retry_after


def test_a_token_over_its_rate_gets_429_and_writes_nothing(reef_app: EmbeddedApp) -> None:
    flooder, other = LIMITED[0], LIMITED[1]
    scenario = unique_scenario("limit-token")
    for _ in range(TOKEN_BURST):
        assert send(reef_app, flooder, scenario).status_code == 200
    before = reef_app.end_offsets()
    refused_id = f"refused-{secrets.token_hex(6)}"
    assert_limited(send(reef_app, flooder, scenario, agent_record_id=refused_id), "token")
    # the token's limit spans scenarios
    assert_limited(send(reef_app, flooder, unique_scenario("limit-token")), "token")
    reef_app.assert_nothing_written(before)
    with reef_app.client(scenario, token=flooder) as client:
        assert_reef_error(client.get(f"/reef/reports/{refused_id}"), 404)
    # another token on the same scenario is not affected
    answer = send(reef_app, other, scenario)
    assert answer.status_code == 200, answer.text
    reports = reef_app.events(REPORTS, scenario)
    assert len(reports) == TOKEN_BURST + 1
    assert refused_id not in {e.event_id for e in reports}


def test_a_scenario_over_its_rate_gets_429_for_every_token(reef_app: EmbeddedApp) -> None:
    busy, quiet = unique_scenario("limit-busy"), unique_scenario("limit-quiet")
    for token in LIMITED[2:4]:
        for _ in range(SCENARIO_BURST // 2):
            answer = send(reef_app, token, busy)
            assert answer.status_code == 200, answer.text
    before = reef_app.end_offsets()
    late = LIMITED[4]  # a fresh token: its own bucket is full, the scenario's is empty
    assert_limited(send(reef_app, late, busy), "scenario")
    reef_app.assert_nothing_written(before)
    # another scenario is not affected, and the refusal cost the token nothing
    for _ in range(TOKEN_BURST):
        answer = send(reef_app, late, quiet)
        assert answer.status_code == 200, answer.text
    assert len(reef_app.events(REPORTS, busy)) == SCENARIO_BURST
    assert len(reef_app.events(REPORTS, quiet)) == TOKEN_BURST


def test_the_reporter_is_the_token_not_what_the_body_claims(reef_app: EmbeddedApp) -> None:
    token = LIMITED[5]
    scenario = unique_scenario("limit-reporter")
    answer = send(reef_app, token, scenario, reporter="someone-else")
    assert answer.status_code == 200, answer.text
    (event,) = reef_app.wait_for(REPORTS, scenario)
    assert isinstance(event, ReportSubmitted)
    assert event.reporter == principal_name(token)
    assert token not in reef_app.raw_log_bytes().decode(errors="replace")
