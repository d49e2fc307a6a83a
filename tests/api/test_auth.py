"""Tokens and scopes: 401 without a valid token, 403 without the scope, in each route's shape.

Through the app ``reef serve`` builds, in process (tests/support/embedded_app.py); that
``reef serve`` refuses to start without a token, and warns with ``--insecure``, is
tests/e2e/test_auth.py."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest

from tests.support.api import (
    assert_anthropic_error,
    assert_openai_error,
    assert_reef_error,
    chat_body,
    error_shape_for,
    messages_body,
    unique_scenario,
)
from tests.support.embedded_app import EmbeddedApp

SCOPES = ("inference", "report", "read", "admin")


@pytest.fixture(scope="module")
def scoped() -> dict[str, str]:
    """One token per single scope, plus one with inference+report."""
    tokens = {scope: f"{scope}-{secrets.token_hex(6)}" for scope in SCOPES}
    tokens["inference+report"] = f"both-{secrets.token_hex(6)}"
    return tokens


@pytest.fixture(scope="module")
def app_options(scoped: dict[str, str]) -> dict[str, Any]:
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


def call(app: EmbeddedApp, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    with app.bare_client() as client:
        return client.request(
            method,
            path,
            json=body_for(path),
            headers={"x-reef-scenario": unique_scenario("auth"), **headers},
        )


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_no_token_is_401(reef_app: EmbeddedApp, method: str, path: str) -> None:
    error_shape_for(path)(call(reef_app, method, path, {}), 401)


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_wrong_token_is_401(reef_app: EmbeddedApp, method: str, path: str) -> None:
    response = call(reef_app, method, path, {"Authorization": "Bearer nope"})
    error_shape_for(path)(response, 401)


@pytest.mark.parametrize(
    "value", ["Basic dXNlcjpwYXNz", "Bearer", "bearer", "Token abc", "Bearer a b"]
)
def test_malformed_authorization_is_401(reef_app: EmbeddedApp, value: str) -> None:
    response = call(reef_app, "POST", "/v1/chat/completions", {"Authorization": value})
    assert_openai_error(response, 401)


def test_token_prefix_or_suffix_is_not_accepted(reef_app: EmbeddedApp) -> None:
    assert reef_app.token is not None
    for near in (reef_app.token[:-1], reef_app.token + "x", reef_app.token.upper()):
        response = call(
            reef_app, "POST", "/v1/chat/completions", {"Authorization": f"Bearer {near}"}
        )
        assert_openai_error(response, 401)


def test_healthz_needs_no_token(reef_app: EmbeddedApp) -> None:
    with reef_app.bare_client() as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True}


def test_full_token_reaches_every_route(reef_app: EmbeddedApp) -> None:
    headers = reef_app.headers()
    for method, path in ROUTES:
        response = call(reef_app, method, path, headers)
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
    reef_app: EmbeddedApp, scoped: dict[str, str], scope: str, method: str, path: str
) -> None:
    response = call(reef_app, method, path, {"Authorization": f"Bearer {scoped[scope]}"})
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
    reef_app: EmbeddedApp, scoped: dict[str, str], scope: str, method: str, path: str
) -> None:
    response = call(reef_app, method, path, {"Authorization": f"Bearer {scoped[scope]}"})
    error_shape_for(path)(response, 403)


def test_x_api_key_accepted_on_anthropic_routes(reef_app: EmbeddedApp) -> None:
    assert reef_app.token is not None
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = call(
            reef_app,
            "POST",
            path,
            {"x-api-key": reef_app.token, "anthropic-version": "2023-06-01"},
        )
        assert response.status_code == 200, (path, response.text)


def test_x_api_key_with_a_scoped_token(reef_app: EmbeddedApp, scoped: dict[str, str]) -> None:
    ok = call(reef_app, "POST", "/v1/messages", {"x-api-key": scoped["inference"]})
    assert ok.status_code == 200, ok.text
    denied = call(reef_app, "POST", "/v1/messages", {"x-api-key": scoped["read"]})
    assert_anthropic_error(denied, 403)


def test_wrong_x_api_key_is_401_in_anthropic_shape(reef_app: EmbeddedApp) -> None:
    response = call(reef_app, "POST", "/v1/messages", {"x-api-key": "nope"})
    assert_anthropic_error(response, 401)


def test_x_api_key_is_not_a_token_on_other_routes(reef_app: EmbeddedApp) -> None:
    assert reef_app.token is not None
    response = call(reef_app, "POST", "/v1/chat/completions", {"x-api-key": reef_app.token})
    assert_openai_error(response, 401)
    response = call(reef_app, "GET", "/reef/scenarios", {"x-api-key": reef_app.token})
    assert_reef_error(response, 401)


def test_failed_auth_writes_nothing(reef_app: EmbeddedApp, scoped: dict[str, str]) -> None:
    before = reef_app.end_offsets()
    call(reef_app, "POST", "/v1/chat/completions", {"Authorization": "Bearer nope"})
    call(reef_app, "POST", "/reef/report", {"Authorization": f"Bearer {scoped['read']}"})
    call(reef_app, "POST", "/reef/scenarios", {})
    reef_app.assert_nothing_written(before)
