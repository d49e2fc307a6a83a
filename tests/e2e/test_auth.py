"""Tokens and scopes: 401 without a valid token, 403 without the scope, in each route's shape."""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.testing.servers import UpstreamProcess, clean_env, free_port, reef_executable
from tests.support.api import (
    assert_anthropic_error,
    assert_openai_error,
    assert_reef_error,
    chat_body,
    error_shape_for,
    messages_body,
    unique_scenario,
)
from tests.support.reef_server import ReefServer, launch

SCOPES = ("inference", "report", "read", "admin")


@pytest.fixture(scope="module")
def scoped() -> dict[str, str]:
    """One token per single scope, plus one with inference+report."""
    tokens = {scope: f"{scope}-{secrets.token_hex(6)}" for scope in SCOPES}
    tokens["inference+report"] = f"both-{secrets.token_hex(6)}"
    return tokens


@pytest.fixture(scope="module")
def reef_options(scoped: dict[str, str]) -> dict[str, Any]:
    return {"tokens": ",".join(f"{token}:{scope}" for scope, token in scoped.items())}


ROUTES = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses"),
    ("GET", "/v1/models"),
    ("POST", "/reef/report"),
    ("GET", "/reef/scenarios"),
    ("POST", "/reef/scenarios"),
    ("GET", "/reef/status"),
    ("GET", "/reef/reports/0123456789abcdef0123456789abcdef"),
]


def body_for(path: str) -> dict[str, Any] | None:
    if path.startswith("/v1/messages"):
        return messages_body("hi")
    if path == "/v1/chat/completions":
        return chat_body("hi")
    if path == "/v1/responses":
        return {"model": "gpt-4o", "input": "hi"}
    if path == "/reef/report":
        return {"score": 1.0, "feedback": "x", "references": []}
    if path == "/reef/scenarios":
        return {"name": unique_scenario("auth")}
    return None


def call(server: ReefServer, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        return client.request(
            method,
            path,
            json=body_for(path),
            headers={"x-reef-scenario": unique_scenario("auth"), **headers},
        )


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_no_token_is_401(reef_server: ReefServer, method: str, path: str) -> None:
    error_shape_for(path)(call(reef_server, method, path, {}), 401)


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_wrong_token_is_401(reef_server: ReefServer, method: str, path: str) -> None:
    response = call(reef_server, method, path, {"Authorization": "Bearer nope"})
    error_shape_for(path)(response, 401)


@pytest.mark.parametrize(
    "value", ["Basic dXNlcjpwYXNz", "Bearer", "bearer", "Token abc", "Bearer a b"]
)
def test_malformed_authorization_is_401(reef_server: ReefServer, value: str) -> None:
    response = call(reef_server, "POST", "/v1/chat/completions", {"Authorization": value})
    assert_openai_error(response, 401)


def test_token_prefix_or_suffix_is_not_accepted(reef_server: ReefServer) -> None:
    assert reef_server.token is not None
    for near in (reef_server.token[:-1], reef_server.token + "x", reef_server.token.upper()):
        response = call(
            reef_server, "POST", "/v1/chat/completions", {"Authorization": f"Bearer {near}"}
        )
        assert_openai_error(response, 401)


def test_healthz_needs_no_token(reef_server: ReefServer) -> None:
    response = httpx.get(f"{reef_server.base_url}/healthz", timeout=10.0)
    assert response.status_code == 200
    assert response.json() == {"ok": True}


def test_full_token_reaches_every_route(reef_server: ReefServer) -> None:
    headers = reef_server.headers()
    for method, path in ROUTES:
        response = call(reef_server, method, path, headers)
        assert response.status_code not in (401, 403), (path, response.text)


ALLOWED = [
    ("inference", "POST", "/v1/chat/completions"),
    ("inference", "POST", "/v1/messages"),
    ("inference", "POST", "/v1/responses"),
    ("report", "POST", "/reef/report"),
    ("read", "GET", "/reef/scenarios"),
    ("read", "GET", "/reef/status"),
    ("inference+report", "POST", "/v1/chat/completions"),
    ("inference+report", "POST", "/reef/report"),
]


@pytest.mark.parametrize(("scope", "method", "path"), ALLOWED)
def test_scope_allows_its_routes(
    reef_server: ReefServer, scoped: dict[str, str], scope: str, method: str, path: str
) -> None:
    response = call(reef_server, method, path, {"Authorization": f"Bearer {scoped[scope]}"})
    assert response.status_code == 200, (scope, path, response.status_code, response.text)


DENIED = [
    ("read", "POST", "/v1/chat/completions"),
    ("report", "POST", "/v1/chat/completions"),
    ("read", "POST", "/v1/messages"),
    ("report", "POST", "/v1/responses"),
    ("inference", "POST", "/reef/report"),
    ("read", "POST", "/reef/report"),
    ("inference", "GET", "/reef/scenarios"),
    ("report", "GET", "/reef/scenarios"),
]


@pytest.mark.parametrize(("scope", "method", "path"), DENIED)
def test_scope_denies_other_routes_with_403(
    reef_server: ReefServer, scoped: dict[str, str], scope: str, method: str, path: str
) -> None:
    response = call(reef_server, method, path, {"Authorization": f"Bearer {scoped[scope]}"})
    error_shape_for(path)(response, 403)


def test_x_api_key_accepted_on_anthropic_routes(reef_server: ReefServer) -> None:
    assert reef_server.token is not None
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = call(
            reef_server,
            "POST",
            path,
            {"x-api-key": reef_server.token, "anthropic-version": "2023-06-01"},
        )
        assert response.status_code == 200, (path, response.text)


def test_x_api_key_with_a_scoped_token(reef_server: ReefServer, scoped: dict[str, str]) -> None:
    ok = call(reef_server, "POST", "/v1/messages", {"x-api-key": scoped["inference"]})
    assert ok.status_code == 200, ok.text
    denied = call(reef_server, "POST", "/v1/messages", {"x-api-key": scoped["read"]})
    assert_anthropic_error(denied, 403)


def test_wrong_x_api_key_is_401_in_anthropic_shape(reef_server: ReefServer) -> None:
    response = call(reef_server, "POST", "/v1/messages", {"x-api-key": "nope"})
    assert_anthropic_error(response, 401)


def test_x_api_key_is_not_a_token_on_other_routes(reef_server: ReefServer) -> None:
    assert reef_server.token is not None
    response = call(reef_server, "POST", "/v1/chat/completions", {"x-api-key": reef_server.token})
    assert_openai_error(response, 401)
    response = call(reef_server, "GET", "/reef/scenarios", {"x-api-key": reef_server.token})
    assert_reef_error(response, 401)


def test_failed_auth_writes_nothing(reef_server: ReefServer, scoped: dict[str, str]) -> None:
    before = reef_server.end_offsets()
    call(reef_server, "POST", "/v1/chat/completions", {"Authorization": "Bearer nope"})
    call(reef_server, "POST", "/reef/report", {"Authorization": f"Bearer {scoped['read']}"})
    call(reef_server, "POST", "/reef/scenarios", {})
    reef_server.assert_nothing_written(before)


# ---------------------------------------------------------------------------
# Start-up without a token


def test_refuses_to_start_without_a_token(
    log_kind: str, upstream: UpstreamProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    args = [
        reef_executable(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--state-dir",
        str(tmp_path / "state"),
        "--log",
        log_kind,
        "--upstream-url",
        upstream.v1_url,
    ]
    if log_kind == "kafka":
        args += ["--kafka-bootstrap", request.getfixturevalue("kafka_topics")]
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"reef serve kept running with no token:\n{output}")
    assert process.returncode != 0, output
    assert re.search(r"token", output, re.I), output
    assert re.search(r"insecure", output, re.I), output


def test_insecure_runs_without_a_token_and_warns(
    log_kind: str, upstream: UpstreamProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bootstrap = request.getfixturevalue("kafka_topics") if log_kind == "kafka" else None
    server = launch(
        log_kind,
        upstream=upstream,
        state_dir=tmp_path / "state",
        token=None,
        args=["--insecure"],
        kafka_bootstrap=bootstrap,
    )
    try:
        scenario = unique_scenario("insecure")
        with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
            response = client.post(
                "/v1/chat/completions",
                json=chat_body("open"),
                headers={"x-reef-scenario": scenario},
            )
        assert response.status_code == 200, response.text
        time.sleep(0.2)
        output = server.process.managed.stdout_text() + server.process.managed.stderr_text()
        assert re.search(r"warn", output, re.I), output
        assert re.search(r"insecure|no token|without (a )?token|unauthenticated", output, re.I)
    finally:
        server.stop()
