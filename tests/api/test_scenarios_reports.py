"""Scenarios (implicit and explicit), the release chain, reports and their fates, records,
through the app ``reef serve`` builds, in process (tests/support/embedded_app.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from reef.core.events import ReportSubmitted, ScenarioCreated
from reef.core.topics import REPORTS, SCENARIOS
from tests.support.api import RECEIPT, assert_reef_error, chat_body, unique_scenario
from tests.support.embedded_app import AppFactory, EmbeddedApp


def infer(app: EmbeddedApp, scenario: str, text: str = "hi") -> tuple[str, str]:
    """One chat completion; (receipt, release id)."""
    with app.client(scenario) as client:
        response = client.post("/v1/chat/completions", json=chat_body(text))
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"], response.headers["x-reef-release-id"]


def report(app: EmbeddedApp, scenario: str, body: dict[str, Any]) -> httpx.Response:
    with app.client(scenario) as client:
        return client.post("/reef/report", json=body)


def get(app: EmbeddedApp, path: str, scenario: str | None = None, **params: Any) -> httpx.Response:
    with app.client(scenario) as client:
        return client.get(path, params=params or None)


def listed(app: EmbeddedApp) -> dict[str, dict[str, Any]]:
    response = get(app, "/reef/scenarios")
    assert response.status_code == 200, response.text
    return {entry["scenario"]: entry for entry in response.json()["scenarios"]}


def created_events(app: EmbeddedApp, scenario: str) -> list[ScenarioCreated]:
    found = app.events(SCENARIOS, scenario)
    assert all(isinstance(e, ScenarioCreated) for e in found)
    return found  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# Scenarios


def test_first_request_creates_the_scenario(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("implicit")
    assert scenario not in listed(reef_app)
    _, release = infer(reef_app, scenario)
    entry = listed(reef_app)[scenario]
    assert entry["recipe"] == "core"
    assert entry["release_id"] == release
    assert entry["created_at"]
    infer(reef_app, scenario)
    (created,) = created_events(reef_app, scenario)
    assert created.recipe == "core"
    assert created.initial_release_id == release


def test_create_scenario_201_then_200(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("explicit")
    with reef_app.client() as client:
        first = client.post("/reef/scenarios", json={"name": scenario})
        second = client.post("/reef/scenarios", json={"name": scenario})
    assert first.status_code == 201, first.text
    assert second.status_code == 200, second.text
    assert scenario in json.dumps(first.json())
    assert len(created_events(reef_app, scenario)) == 1
    assert scenario in listed(reef_app)


def test_explicit_creation_then_inference_serves_the_creation_release(
    reef_app: EmbeddedApp,
) -> None:
    scenario = unique_scenario("explicit")
    with reef_app.client() as client:
        assert client.post("/reef/scenarios", json={"name": scenario}).status_code == 201
    _, release = infer(reef_app, scenario)
    (created,) = created_events(reef_app, scenario)
    assert created.initial_release_id == release


@pytest.mark.parametrize(
    "body",
    [
        {"name": ""},
        {"name": "-dash"},
        {"name": "has space"},
        {"name": "a/b"},
        {"name": "x" * 129},
        {"name": 5},
        {"name": None},
        {},
    ],
    ids=["empty", "dash", "space", "slash", "too-long", "int", "null", "missing"],
)
def test_create_scenario_with_invalid_name_is_400(
    reef_app: EmbeddedApp, body: dict[str, Any]
) -> None:
    before = reef_app.end_offsets()
    with reef_app.client() as client:
        response = client.post("/reef/scenarios", json=body)
    assert_reef_error(response, 400)
    reef_app.assert_nothing_written(before)


@pytest.mark.parametrize(
    "name",
    [f"A.b-c_9{uuid.uuid4().hex}", uuid.uuid4().hex + "x" * 96],
    ids=["all-classes", "128-chars"],
)
def test_names_at_the_edge_of_the_rule_are_accepted(reef_app: EmbeddedApp, name: str) -> None:
    with reef_app.client() as client:
        response = client.post("/reef/scenarios", json={"name": name})
    assert response.status_code == 201, response.text


def test_one_character_name_is_accepted(reef_app: EmbeddedApp) -> None:
    with reef_app.client() as client:
        response = client.post("/reef/scenarios", json={"name": "a"})
    assert response.status_code == 201, response.text


def test_release_chain_has_one_current_creation_release(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("chain")
    _, release = infer(reef_app, scenario)
    response = get(reef_app, f"/reef/scenarios/{scenario}/releases")
    assert response.status_code == 200, response.text
    chain = response.json()
    assert chain["scenario"] == scenario
    (head,) = chain["releases"]
    assert head["release_id"] == release
    assert head["operation"] == "creation"
    assert head["current"] is True
    assert head["pending"] is False
    assert head["parent_release_id"] is None
    assert head["created_at"]
    assert "content_id" in head


def test_releases_of_an_unknown_scenario_is_404(reef_app: EmbeddedApp) -> None:
    response = get(reef_app, f"/reef/scenarios/{unique_scenario('ghost')}/releases")
    assert_reef_error(response, 404)


@pytest.mark.parametrize("name", ["-dash", "has%20space", "x" * 129])
def test_invalid_scenario_name_in_the_path_is_400(reef_app: EmbeddedApp, name: str) -> None:
    assert_reef_error(get(reef_app, f"/reef/scenarios/{name}/releases"), 400)


def test_scenarios_survive_a_restart(
    app_factory: AppFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The log is the database: a new app on the same log knows the old scenarios."""
    state = tmp_path_factory.mktemp("restart")
    first = app_factory(state_dir=state)
    scenario = unique_scenario("restart")
    _, release = infer(first, scenario)
    first.stop()
    second = app_factory(state_dir=state)
    assert scenario in listed(second)
    _, again = infer(second, scenario)
    assert again == release
    assert len(created_events(first, scenario)) == 1


# ---------------------------------------------------------------------------
# Reports


def test_report_answer_and_event(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("report")
    receipt, _ = infer(reef_app, scenario)
    response = report(
        reef_app,
        scenario,
        {
            "score": 0.5,
            "feedback": {"why": "close"},
            "references": [receipt],
            "metadata": {"k": 1},
        },
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer == {
        "agent_record_id": answer["agent_record_id"],
        "scenario": scenario,
        "request_type": "report",
    }
    (event,) = reef_app.events(REPORTS, scenario)
    assert isinstance(event, ReportSubmitted)
    assert event.event_id == answer["agent_record_id"]
    assert event.references == [receipt]
    assert event.score == 0.5
    assert json.loads(event.feedback_json) == {"why": "close"}
    assert json.loads(event.metadata_json) == {"k": 1}


def test_report_with_string_feedback_and_unknown_keys(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("report")
    receipt, _ = infer(reef_app, scenario)
    response = report(
        reef_app,
        scenario,
        {
            "score": 1,
            "feedback": "fine",
            "references": [receipt],
            "surprise": [1, 2, 3],
        },
    )
    assert response.status_code == 200, response.text
    (event,) = reef_app.events(REPORTS, scenario)
    assert isinstance(event, ReportSubmitted)
    assert event.score == 1.0
    assert json.loads(event.feedback_json) == "fine"
    assert "surprise" not in event.metadata_json


def test_first_report_creates_the_scenario(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("report-first")
    response = report(reef_app, scenario, {"score": 1.0, "feedback": "x", "references": []})
    assert response.status_code == 200, response.text
    assert scenario in listed(reef_app)


def test_identical_resend_gives_the_same_answer_and_no_new_event(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("resend")
    receipt, _ = infer(reef_app, scenario)
    report_id = uuid.uuid4().hex
    body = {"score": 1.0, "feedback": "same", "references": [receipt], "agent_record_id": report_id}
    first = report(reef_app, scenario, body)
    assert first.status_code == 200, first.text
    assert first.json()["agent_record_id"] == report_id
    before = reef_app.end_offsets()
    again = report(reef_app, scenario, body)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    reef_app.assert_nothing_written(before)
    assert [e.event_id for e in reef_app.events(REPORTS, scenario)] == [report_id]


def test_same_report_id_with_different_content_is_409(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("conflict")
    receipt, _ = infer(reef_app, scenario)
    report_id = uuid.uuid4().hex
    body = {"score": 1.0, "feedback": "one", "references": [receipt], "agent_record_id": report_id}
    assert report(reef_app, scenario, body).status_code == 200
    before = reef_app.end_offsets()
    conflict = report(reef_app, scenario, {**body, "score": 0.0})
    assert_reef_error(conflict, 409)
    reef_app.assert_nothing_written(before)


def test_report_fate_is_pending_and_scoped_to_its_scenario(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("fate")
    receipt, _ = infer(reef_app, scenario)
    answer = report(reef_app, scenario, {"score": 1.0, "feedback": "x", "references": [receipt]})
    report_id = answer.json()["agent_record_id"]
    fate = get(reef_app, f"/reef/reports/{report_id}", scenario)
    assert fate.status_code == 200, fate.text
    body = fate.json()
    assert body["agent_record_id"] == report_id
    assert body["scenario"] == scenario
    # pending until the join processor runs (beside the app, on its loop)
    assert body["status"] in ("pending", "accepted"), body
    other = unique_scenario("other")
    infer(reef_app, other)
    assert_reef_error(get(reef_app, f"/reef/reports/{report_id}", other), 404)
    assert_reef_error(get(reef_app, f"/reef/reports/{uuid.uuid4().hex}", scenario), 404)


def test_report_fate_needs_the_scenario_header(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("fate")
    answer = report(reef_app, scenario, {"score": 1.0, "feedback": "x", "references": []})
    report_id = answer.json()["agent_record_id"]
    assert_reef_error(get(reef_app, f"/reef/reports/{report_id}"), 400)


# ---------------------------------------------------------------------------
# Records and status


def records_of(body: Any) -> list[Any]:
    assert isinstance(body, dict) and isinstance(body.get("records"), list), body
    found: list[Any] = body["records"]
    return found


def test_records_list_and_get(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("records")
    receipts = [infer(reef_app, scenario, f"record {i}")[0] for i in range(2)]

    listing = get(reef_app, f"/reef/scenarios/{scenario}/records")
    assert listing.status_code == 200, listing.text
    assert [r["agent_record_id"] for r in records_of(listing.json())] == receipts

    one = get(reef_app, f"/reef/scenarios/{scenario}/records/{receipts[0]}")
    assert one.status_code == 200, one.text
    assert one.json()["agent_record_id"] == receipts[0]
    assert "record 0" in json.dumps(one.json())

    other = unique_scenario("records-other")
    infer(reef_app, other)
    assert_reef_error(get(reef_app, f"/reef/scenarios/{other}/records/{receipts[0]}"), 404)
    missing = get(reef_app, f"/reef/scenarios/{scenario}/records/{uuid.uuid4().hex}")
    assert_reef_error(missing, 404)


def test_reports_are_records_too(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("records")
    receipt, _ = infer(reef_app, scenario)
    answer = report(reef_app, scenario, {"score": 1.0, "feedback": "x", "references": [receipt]})
    report_id = answer.json()["agent_record_id"]
    one = get(reef_app, f"/reef/scenarios/{scenario}/records/{report_id}")
    assert one.status_code == 200, one.text
    assert one.json()["agent_record_id"] == report_id
    listing = get(reef_app, f"/reef/scenarios/{scenario}/records")
    listed_ids = [r["agent_record_id"] for r in records_of(listing.json())]
    assert listed_ids == [receipt, report_id], "the raw history should list the report too"


def test_records_pages_walk_everything_once(reef_app: EmbeddedApp) -> None:
    scenario = unique_scenario("pages")
    receipts = [infer(reef_app, scenario, f"page {i}")[0] for i in range(3)]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    for _ in range(5):
        page = get(reef_app, f"/reef/scenarios/{scenario}/records", **params).json()
        batch = records_of(page)
        assert len(batch) <= 2
        if not batch:
            break
        seen += [r["agent_record_id"] for r in batch]
        params = {"limit": 2, "after": page["next_after"]}
    assert seen == receipts


def test_status_answers(reef_app: EmbeddedApp) -> None:
    response = get(reef_app, "/reef/status")
    assert response.status_code == 200, response.text
    assert isinstance(response.json(), dict)


def test_receipts_are_32_hex(reef_app: EmbeddedApp) -> None:
    receipt, _ = infer(reef_app, unique_scenario("hex"))
    assert RECEIPT.match(receipt)
