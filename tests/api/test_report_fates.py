"""Report fates through the app ``reef serve`` builds, in process, with the embedded
processors beside it (tests/support/embedded_app.py).

``GET /reef/reports/{id}`` answers ``pending`` until the join decides, then ``accepted``
or ``rejected`` with the join's reason. The app runs with a 1 s park timeout
(``REEF_JOIN_PARK_TIMEOUT_S=1``): a report on a receipt that never arrives stays pending
until a later event of its scenario moves the scenario's event time past its deadline.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from reef.core.events import ReportRejected, SampleJoined
from reef.core.ids import scenario_tag
from reef.core.topics import SAMPLES
from tests.support.api import chat_body, unique_scenario
from tests.support.embedded_app import EmbeddedApp


@pytest.fixture(scope="module")
def app_options() -> dict[str, Any]:
    return {"env": {"REEF_JOIN_PARK_TIMEOUT_S": "1"}}


def infer(app: EmbeddedApp, scenario: str, text: str = "hi") -> str:
    with app.client(scenario) as client:
        response = client.post("/v1/chat/completions", json=chat_body(text))
    assert response.status_code == 200, response.text
    receipt: str = response.headers["x-reef-agent-record-id"]
    return receipt


def submit(
    app: EmbeddedApp, scenario: str, references: list[str], **extra: Any
) -> tuple[str, httpx.Response]:
    body = {"score": 1.0, "feedback": "good", "references": references, **extra}
    with app.client(scenario) as client:
        response = client.post("/reef/report", json=body)
    assert response.status_code == 200, response.text
    return response.json()["agent_record_id"], response


def fate(app: EmbeddedApp, scenario: str, report_id: str) -> dict[str, Any]:
    with app.client(scenario) as client:
        response = client.get(f"/reef/reports/{report_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["agent_record_id"] == report_id and body["scenario"] == scenario
    return body


def decided(app: EmbeddedApp, scenario: str, report_id: str, timeout: float = 15.0) -> Any:
    """Poll the fate until it is no longer pending."""
    deadline = time.monotonic() + timeout
    while True:
        body = fate(app, scenario, report_id)
        if body["status"] != "pending":
            return body
        assert time.monotonic() < deadline, f"still pending after {timeout}s: {body}"
        time.sleep(0.05)


def test_a_report_on_a_recorded_exchange_is_accepted(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("fates")
    receipt = infer(reef_app, scenario)
    report_id, _ = submit(reef_app, scenario, [receipt])
    first = fate(reef_app, scenario, report_id)
    assert first["status"] in ("pending", "accepted"), first
    body = decided(reef_app, scenario, report_id)
    assert body["status"] == "accepted" and body["reason"] is None, body
    (sample,) = reef_app.wait_for(SAMPLES, scenario, lambda e: isinstance(e, SampleJoined))
    assert isinstance(sample, SampleJoined)
    assert sample.report_id == report_id and sample.references == [receipt]
    # an identical resend changes nothing
    submit(reef_app, scenario, [receipt], agent_record_id=report_id)
    assert decided(reef_app, scenario, report_id) == body
    assert len(reef_app.events(SAMPLES, scenario)) == 1


def test_several_receipts_join_into_one_sample(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("fates")
    receipts = [infer(reef_app, scenario, f"turn {i}") for i in range(3)]
    report_id, _ = submit(reef_app, scenario, receipts)
    assert decided(reef_app, scenario, report_id)["status"] == "accepted"
    (sample,) = reef_app.wait_for(SAMPLES, scenario)
    assert isinstance(sample, SampleJoined) and sample.references == receipts


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("consumed", "already_consumed"),
        ("foreign", "foreign_reference"),
        ("none", "no_references"),
        ("repeated", "duplicate_reference"),
    ],
)
def test_rejections_carry_the_reason(reef_app: EmbeddedApp, case: str, reason: str) -> None:
    scenario = unique_scenario("fates")
    receipt = infer(reef_app, scenario)
    if case == "consumed":
        first, _ = submit(reef_app, scenario, [receipt])
        assert decided(reef_app, scenario, first)["status"] == "accepted"
        references = [receipt]
    elif case == "foreign":
        references = [infer(reef_app, unique_scenario("elsewhere"))]
    elif case == "none":
        references = []
    else:
        references = [receipt, receipt]
    report_id, _ = submit(reef_app, scenario, references)
    body = decided(reef_app, scenario, report_id)
    assert body == {
        "agent_record_id": report_id,
        "scenario": scenario,
        "status": "rejected",
        "reason": reason,
        "release_id": None,
    }
    rejected = reef_app.wait_for(
        SAMPLES, scenario, lambda e: isinstance(e, ReportRejected) and e.report_id == report_id
    )
    assert [e.reason for e in rejected] == [reason]  # type: ignore[attr-defined]


def test_an_unknown_reference_waits_then_is_rejected_after_the_park_timeout(
    reef_app: EmbeddedApp,
) -> None:
    scenario = unique_scenario("fates")
    infer(reef_app, scenario)
    never = scenario_tag(scenario) + uuid.uuid4().hex[:24]  # well formed, never recorded
    report_id, _ = submit(reef_app, scenario, [never])
    # parked: pending, and still pending once the timeout passed with nothing happening
    time.sleep(0.5)
    assert fate(reef_app, scenario, report_id)["status"] == "pending"
    time.sleep(1.2)
    assert fate(reef_app, scenario, report_id)["status"] == "pending"
    # event time, not wall time, expires it: any later event of the scenario does
    infer(reef_app, scenario, "later")
    body = decided(reef_app, scenario, report_id)
    assert (body["status"], body["reason"]) == ("rejected", "unknown_reference"), body


def test_a_parked_report_holds_no_receipt_and_only_its_scenario_expires_it(
    reef_app: EmbeddedApp,
) -> None:
    scenario = unique_scenario("fates")
    receipt = infer(reef_app, scenario)
    waiting, _ = submit(reef_app, scenario, [receipt, scenario_tag(scenario) + "0" * 24])
    time.sleep(1.3)
    infer(reef_app, unique_scenario("other"))  # another scenario's clock: no effect
    time.sleep(0.3)
    assert fate(reef_app, scenario, waiting)["status"] == "pending"
    # the receipt it waits on is not held: another report takes it (and, being a later
    # event of the scenario, expires the waiting one first)
    alone, _ = submit(reef_app, scenario, [receipt])
    assert decided(reef_app, scenario, alone)["status"] == "accepted"
    body = decided(reef_app, scenario, waiting)
    assert (body["status"], body["reason"]) == ("rejected", "unknown_reference"), body
