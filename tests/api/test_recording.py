"""What lands in the log: every receipt a client got, nothing for upstream failures, no secrets.

Through the app ``reef serve`` builds, in process (tests/support/embedded_app.py); what
it logs is every record its loggers emit, at every level, from start to stop.
"""

from __future__ import annotations

import gc
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from tests.support.api import (
    RECEIPT,
    chat_body,
    claude_code_turns,
    marker,
    messages_body,
    unique_scenario,
)
from tests.support.embedded_app import AppFactory, EmbeddedApp, running_app


@pytest.fixture(scope="module")
def openai_app(app_factory: AppFactory) -> EmbeddedApp:
    return app_factory(dialect="openai")


@pytest.fixture(scope="module")
def anthropic_app(app_factory: AppFactory) -> EmbeddedApp:
    return app_factory(dialect="anthropic")


def final_receipt(lines: list[str]) -> str | None:
    """The receipt in a stream's terminal event (any dialect), if there is one."""
    for line in reversed(lines):
        if line.startswith("data:") and "agent_record_id" in line:
            data = json.loads(line[5:])
            receipt: str = data["reef"]["agent_record_id"]
            return receipt
    return None


def exchange(
    client: httpx.Client, path: str, body: dict[str, Any], *, stream: bool
) -> tuple[str, str | None]:
    """Send one inference; return (receipt, x-reef-release-id)."""
    if not stream:
        response = client.post(path, json=body)
        assert response.status_code == 200, response.text
        return response.headers["x-reef-agent-record-id"], response.headers.get("x-reef-release-id")
    with client.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        receipt = final_receipt(list(response.iter_lines()))
        assert receipt is not None, "no receipt at the end of the stream"
        return receipt, response.headers.get("x-reef-release-id")


CASES = [
    pytest.param("openai", "/v1/chat/completions", False, id="chat"),
    pytest.param("openai", "/v1/chat/completions", True, id="chat-stream"),
    pytest.param("openai", "/v1/responses", False, id="responses"),
    pytest.param("openai", "/v1/responses", True, id="responses-stream"),
    pytest.param("anthropic", "/v1/messages", False, id="messages"),
    pytest.param("anthropic", "/v1/messages", True, id="messages-stream"),
]


def body_for(path: str, text: str) -> dict[str, Any]:
    if path == "/v1/messages":
        return messages_body(text)
    if path == "/v1/responses":
        return {"model": "gpt-4o", "input": text}
    return chat_body(text)


@pytest.mark.parametrize(("dialect", "path", "stream"), CASES)
def test_every_receipt_is_in_the_log_with_the_release_that_served_it(
    openai_app: EmbeddedApp,
    anthropic_app: EmbeddedApp,
    dialect: str,
    path: str,
    stream: bool,
) -> None:
    app = anthropic_app if dialect == "anthropic" else openai_app
    scenario = unique_scenario("rec")
    word = marker()
    with app.client(scenario) as client:
        served = [
            exchange(client, path, body_for(path, f"Return exactly: {word} {i}"), stream=stream)
            for i in range(2)
        ]
    events = {e.event_id: e for e in app.inference(scenario)}
    assert set(events) == {receipt for receipt, _ in served}, events.keys()
    for i, (receipt, release) in enumerate(served):
        assert RECEIPT.match(receipt), receipt
        assert release, "no x-reef-release-id header"
        event = events[receipt]
        assert event.scenario == scenario
        assert event.release_id == release
        assert event.complete is True
        assert event.status == 200
        assert event.stream is stream
        assert word in (event.request_json or ""), event.request_json
        assert word in (event.response_json or ""), event.response_json
        assert f"{word} {i}" in (event.request_json or "")


def test_an_agents_turns_reach_the_provider_and_the_log_byte_for_byte(
    anthropic_app: EmbeddedApp,
) -> None:
    """Claude Code's turns as it writes them, streamed, in one session: each is read by
    what is new since the one before, and the provider and the log get its bytes."""
    scenario = unique_scenario("agent")
    session = uuid.uuid4().hex
    turns = claude_code_turns(3)
    recent = anthropic_app.ctx.requests
    reread = recent.reread
    receipts: list[str] = []
    with anthropic_app.client(scenario) as client:
        for raw in turns:
            headers = {"content-type": "application/json", "x-claude-code-session-id": session}
            with client.stream("POST", "/v1/messages", content=raw, headers=headers) as response:
                assert response.status_code == 200, response.read()
                receipt = final_receipt(list(response.iter_lines()))
                assert receipt is not None, "no receipt at the end of the stream"
                receipts.append(receipt)
    assert recent.reread - reread == len(turns) - 1
    with anthropic_app.client() as client:
        exposition = client.get("/metrics").text
    assert f'reef_request_reads_total{{read="new"}} {float(recent.reread)}' in exposition
    assert f"reef_request_layouts_bytes {float(recent.held)}" in exposition
    assert recent.held >= len(turns[-1])
    events = {e.event_id: e for e in anthropic_app.inference(scenario)}
    assert [events[r].request_json for r in receipts] == [raw.decode() for raw in turns]
    assert anthropic_app.upstream is not None
    relayed = [r["raw"] for r in anthropic_app.upstream.requests() if r["path"] == "/v1/messages"]
    assert relayed[-len(turns) :] == [raw.decode() for raw in turns]


def test_no_event_for_requests_that_failed_upstream(openai_app: EmbeddedApp) -> None:
    scenario = unique_scenario("fail")
    word = marker()
    with openai_app.client(scenario) as client:
        ok = client.post("/v1/chat/completions", json=chat_body(f"fine {word}"))
        assert ok.status_code == 200, ok.text
        failures = [
            client.post("/v1/chat/completions", json=chat_body(f"{word} __status_500__")),
            client.post("/v1/chat/completions", json=chat_body(f"{word} __status_429__")),
            client.post("/v1/chat/completions", json=chat_body(f"{word} __status_400__")),
            client.post("/v1/responses", json={"model": "m", "input": f"{word} __status_503__"}),
            client.post(
                "/v1/chat/completions", json=chat_body(f"{word} __status_500__", stream=True)
            ),
        ]
    assert [r.status_code for r in failures] == [502, 429, 400, 502, 502]
    for response in failures:
        assert "x-reef-agent-record-id" not in response.headers
    events = openai_app.inference(scenario)
    assert [e.event_id for e in events] == [ok.headers["x-reef-agent-record-id"]]
    everything = openai_app.events(INFERENCE)
    assert not any(
        "__status_" in (e.request_json or "") and word in (e.request_json or "")
        for e in everything
        if isinstance(e, InferenceRecorded)
    )


def test_buffered_upstream_that_breaks_mid_body_is_a_502_with_no_receipt(
    openai_app: EmbeddedApp,
) -> None:
    scenario = unique_scenario("brk")
    with openai_app.client(scenario) as client:
        response = client.post("/v1/chat/completions", json=chat_body("x __break_stream__"))
    assert response.status_code == 502, response.text
    assert "x-reef-agent-record-id" not in response.headers
    assert all(not e.complete for e in openai_app.inference(scenario))


def native(app: EmbeddedApp, text: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    """The route and body of the app's own dialect."""
    if app.dialect == "anthropic":
        return "/v1/messages", messages_body(text, **extra)
    return "/v1/chat/completions", chat_body(text, **extra)


def test_no_secret_reaches_the_log(openai_app: EmbeddedApp, anthropic_app: EmbeddedApp) -> None:
    scenario = unique_scenario("secret")
    for app in (openai_app, anthropic_app):
        assert app.token is not None
        with app.client(scenario) as client:
            path, body = native(app, "hi")
            assert client.post(path, json=body).status_code == 200
            path, body = native(app, "hi", stream=True)
            with client.stream("POST", path, json=body) as streamed:
                streamed.read()
            report = client.post(
                "/reef/report", json={"score": 1.0, "feedback": "fine", "references": []}
            )
            assert report.status_code == 200, report.text
        with app.bare_client() as client:
            if app.dialect == "anthropic":  # the Anthropic SDK's way: x-api-key
                response = client.post(
                    "/v1/messages",
                    json=messages_body("hi"),
                    headers={
                        "x-api-key": app.token,
                        "x-reef-scenario": scenario,
                        "anthropic-version": "2023-06-01",
                    },
                )
                assert response.status_code == 200, response.text
            path, body = native(app, "hi")
            client.post(
                path,
                json=body,
                headers={
                    "Authorization": "Bearer wrong-token-on-purpose",
                    "x-reef-scenario": scenario,
                },
            )
        raw = app.raw_log_bytes()
        assert scenario.encode() in raw, "the log was not read (scenario name missing)"
        for secret in (app.token, app.upstream_key, "wrong-token-on-purpose"):
            assert secret.encode() not in raw, f"{secret!r} is in the {app.kind} log"
        for event in app.events(INFERENCE, scenario):
            assert isinstance(event, InferenceRecorded)
            for name in ("authorization", "x-api-key"):
                assert name not in (event.request_json or "").lower(), event.request_json


def test_no_secret_in_what_the_app_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for dialect in ("openai", "anthropic"):
        with caplog.at_level(logging.DEBUG):
            with (
                running_app(tmp_path / dialect, dialect=dialect) as app,
                app.client(unique_scenario("out")) as client,
            ):
                path, body = native(app, "hi")
                client.post(path, json=body).raise_for_status()
            logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
        assert app.token is not None
        assert caplog.records, "nothing was logged: the capture saw nothing"
        assert app.token not in logged
        assert app.upstream_key not in logged
        caplog.clear()


def test_what_start_up_built_is_out_of_the_collectors_sight_while_the_app_serves(
    tmp_path: Path,
) -> None:
    """The app freezes the objects its start-up built (``gc.freeze``): a collection
    started by a request's garbage does not traverse them again."""
    with running_app(tmp_path / "state") as app, app.client(unique_scenario("gc")) as client:
        assert gc.get_freeze_count() > 0
        path, body = native(app, "hi")
        answer = client.post(path, json=body)
        answer.raise_for_status()
        assert RECEIPT.match(answer.headers["x-reef-agent-record-id"])
