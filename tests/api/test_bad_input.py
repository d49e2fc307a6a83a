"""Bad input gets a clear error in the route's shape, and writes nothing to the log.

Through the app ``reef serve`` builds, in process (tests/support/embedded_app.py): httpx
over the ASGI transport, or a loopback socket where the HTTP framing is the point (a
chunked body).

"Nothing written" compares the end offsets of every topic before and after. Cases that
could create a scenario use a fresh name, so an implicit creation would show up too;
upstream failures use a scenario created beforehand (its creation is not the point).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.testing.servers import dead_url
from tests.support.api import (
    assert_openai_error,
    assert_reef_error,
    chat_body,
    error_shape_for,
    marker,
    messages_body,
    unique_scenario,
)
from tests.support.disk import fill_disk, tiny_tmpfs
from tests.support.embedded_app import AppFactory, EmbeddedApp, running_app
from tests.support.log_down import check_log_down

MAX_BODY = 4096
READ_TIMEOUT_S = 1.5
INFERENCE_ROUTES = ["/v1/chat/completions", "/v1/messages", "/v1/responses"]


@pytest.fixture(scope="module")
def scoped() -> dict[str, str]:
    """One token per single scope."""
    return {scope: f"{scope}-{secrets.token_hex(6)}" for scope in ("inference", "report", "read")}


@pytest.fixture(scope="module")
def app_options(scoped: dict[str, str]) -> dict[str, Any]:
    return {
        "tokens": ",".join(f"{token}:{scope}" for scope, token in scoped.items()),
        "flags": {"max_body_bytes": MAX_BODY},
        "env": {"REEF_UPSTREAM_READ_TIMEOUT_S": str(READ_TIMEOUT_S)},
    }


def valid_body(path: str) -> dict[str, Any]:
    if path.startswith("/v1/messages"):
        return messages_body("hello")
    if path == "/v1/responses":
        return {"model": "gpt-4o", "input": "hello"}
    if path == "/reef/report":
        return {"score": 1.0, "feedback": "fine", "references": []}
    return chat_body("hello")


def post_raw(
    app: EmbeddedApp,
    path: str,
    content: bytes,
    *,
    scenario: str | None = None,
    token: str | None = None,
    headers: dict[str, Any] | None = None,
) -> httpx.Response:
    with app.bare_client() as client:
        return client.post(
            path,
            content=content,
            headers={
                **app.headers(scenario, token),
                "content-type": "application/json",
                **(headers or {}),
            },
        )


# ---------------------------------------------------------------------------
# Malformed requests


@pytest.mark.parametrize(
    "path", [*INFERENCE_ROUTES, "/v1/messages/count_tokens", "/reef/report", "/reef/scenarios"]
)
def test_malformed_json_is_400(reef_app: EmbeddedApp, path: str) -> None:
    before = reef_app.end_offsets()
    response = post_raw(
        reef_app, path, b'{"model": "gpt-4o", "messages": [', scenario=unique_scenario("bad")
    )
    error_shape_for(path)(response, 400)
    reef_app.assert_nothing_written(before)


def test_report_that_is_not_an_object_is_400(reef_app: EmbeddedApp) -> None:
    before = reef_app.end_offsets()
    response = post_raw(reef_app, "/reef/report", b"[1, 2]", scenario=unique_scenario("bad"))
    assert_reef_error(response, 400)
    reef_app.assert_nothing_written(before)


@pytest.mark.parametrize("path", [*INFERENCE_ROUTES, "/reef/report"])
def test_missing_scenario_header_is_400(reef_app: EmbeddedApp, path: str) -> None:
    before = reef_app.end_offsets()
    with reef_app.bare_client() as client:
        response = client.post(path, json=valid_body(path), headers=reef_app.headers())
    error_shape_for(path)(response, 400)
    reef_app.assert_nothing_written(before)


INVALID_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("-leading-dash", id="leading-dash"),
    pytest.param(".hidden", id="leading-dot"),
    pytest.param("has space", id="space"),
    pytest.param("a/b", id="slash"),
    pytest.param("semi;colon", id="semicolon"),
    pytest.param("x" * 129, id="too-long"),
    pytest.param("\u00fcber".encode(), id="non-ascii"),
]


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_scenario_header_is_400(reef_app: EmbeddedApp, name: str | bytes) -> None:
    before = reef_app.end_offsets()
    with reef_app.bare_client() as client:
        response = client.post(
            "/v1/chat/completions",
            json=chat_body("hello"),
            # httpx takes str and bytes values alike; its stub wants one kind
            headers={**reef_app.headers(), "x-reef-scenario": name},  # type: ignore[arg-type]
        )
    assert_openai_error(response, 400)
    reef_app.assert_nothing_written(before)


@pytest.mark.parametrize("path", ["/v1/messages", "/reef/report"])
def test_invalid_scenario_header_shape_per_route(reef_app: EmbeddedApp, path: str) -> None:
    before = reef_app.end_offsets()
    with reef_app.bare_client() as client:
        response = client.post(
            path,
            json=valid_body(path),
            headers={**reef_app.headers(), "x-reef-scenario": "bad name!"},
        )
    error_shape_for(path)(response, 400)
    reef_app.assert_nothing_written(before)


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/nope"), ("POST", "/nope"), ("GET", "/reef/nope"), ("POST", "/reef/nope/deeper")],
)
def test_unknown_route_is_404_in_reef_shape(reef_app: EmbeddedApp, method: str, path: str) -> None:
    before = reef_app.end_offsets()
    with reef_app.client(unique_scenario("bad")) as client:
        response = client.request(method, path, json={"x": 1} if method == "POST" else None)
    assert_reef_error(response, 404)
    reef_app.assert_nothing_written(before)


# ---------------------------------------------------------------------------
# Oversized bodies


def oversized(path: str) -> dict[str, Any]:
    body = valid_body(path)
    padding = "x" * (MAX_BODY * 2)
    if path == "/reef/report":
        return {**body, "feedback": padding}
    if path == "/v1/responses":
        return {**body, "input": padding}
    return {**body, "messages": [{"role": "user", "content": padding}]}


@pytest.mark.parametrize("path", [*INFERENCE_ROUTES, "/reef/report"])
def test_oversized_body_is_413(reef_app: EmbeddedApp, path: str) -> None:
    before = reef_app.end_offsets()
    with reef_app.client(unique_scenario("big")) as client:
        response = client.post(path, json=oversized(path))
    error_shape_for(path)(response, 413)
    reef_app.assert_nothing_written(before)


def test_oversized_chunked_body_without_length_is_413(reef_app: EmbeddedApp) -> None:
    import orjson

    payload = orjson.dumps(oversized("/v1/chat/completions"))

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(payload), 1024):
            yield payload[start : start + 1024]

    before = reef_app.end_offsets()
    headers = {**reef_app.headers(unique_scenario("big")), "content-type": "application/json"}
    with httpx.Client(base_url=reef_app.base_url, headers=headers, timeout=30.0) as client:
        response = client.post("/v1/chat/completions", content=chunks())
    assert_openai_error(response, 413)
    reef_app.assert_nothing_written(before)


# ---------------------------------------------------------------------------
# Reports with bad fields


BAD_SCORES = [
    pytest.param(b"NaN", id="nan"),
    pytest.param(b"Infinity", id="inf"),
    pytest.param(b"-Infinity", id="-inf"),
    pytest.param(b"1e999", id="overflow"),
    pytest.param(b"true", id="true"),
    pytest.param(b"false", id="false"),
    pytest.param(b'"1.0"', id="string"),
    pytest.param(b"[1.0]", id="list"),
]


@pytest.mark.parametrize("score", BAD_SCORES)
def test_non_finite_or_boolean_score_is_400(reef_app: EmbeddedApp, score: bytes) -> None:
    before = reef_app.end_offsets()
    content = b'{"score": ' + score + b', "feedback": "x", "references": []}'
    response = post_raw(reef_app, "/reef/report", content, scenario=unique_scenario("score"))
    assert_reef_error(response, 400)
    reef_app.assert_nothing_written(before)


BAD_REFERENCES = [
    pytest.param([1], id="int"),
    pytest.param([None], id="null"),
    pytest.param([True], id="bool"),
    pytest.param([{"id": "abc"}], id="object"),
    pytest.param([["abc"]], id="nested-list"),
    pytest.param("abc", id="string-not-list"),
    pytest.param({"abc": "def"}, id="object-not-list"),
]


@pytest.mark.parametrize("references", BAD_REFERENCES)
def test_references_that_are_not_strings_are_400(reef_app: EmbeddedApp, references: Any) -> None:
    before = reef_app.end_offsets()
    with reef_app.client(unique_scenario("refs")) as client:
        response = client.post(
            "/reef/report", json={"score": 1.0, "feedback": "x", "references": references}
        )
    assert_reef_error(response, 400)
    reef_app.assert_nothing_written(before)


# ---------------------------------------------------------------------------
# Tokens


@pytest.mark.parametrize("path", [*INFERENCE_ROUTES, "/reef/report"])
def test_wrong_token_is_401(reef_app: EmbeddedApp, path: str) -> None:
    before = reef_app.end_offsets()
    with reef_app.client(unique_scenario("tok"), token="wrong-token") as client:
        response = client.post(path, json=valid_body(path))
    error_shape_for(path)(response, 401)
    reef_app.assert_nothing_written(before)


@pytest.mark.parametrize(
    ("scope", "path"),
    [
        ("read", "/v1/chat/completions"),
        ("report", "/v1/chat/completions"),
        ("read", "/v1/messages"),
        ("read", "/v1/responses"),
        ("inference", "/reef/report"),
        ("read", "/reef/report"),
    ],
)
def test_token_without_the_scope_is_403(
    reef_app: EmbeddedApp, scoped: dict[str, str], scope: str, path: str
) -> None:
    before = reef_app.end_offsets()
    with reef_app.client(unique_scenario("scope"), token=scoped[scope]) as client:
        response = client.post(path, json=valid_body(path))
    error_shape_for(path)(response, 403)
    reef_app.assert_nothing_written(before)


# ---------------------------------------------------------------------------
# Upstream trouble


def created_scenario(app: EmbeddedApp) -> str:
    scenario = unique_scenario("up")
    with app.client() as client:
        response = client.post("/reef/scenarios", json={"name": scenario})
    assert response.status_code == 201, response.text
    return scenario


@pytest.fixture(scope="module")
def dead_upstream_app(app_factory: AppFactory) -> EmbeddedApp:
    return app_factory(upstream_url=dead_url())


@pytest.mark.parametrize(
    ("path", "stream"),
    [("/v1/chat/completions", False), ("/v1/chat/completions", True), ("/v1/responses", False)],
)
def test_upstream_down_is_502(dead_upstream_app: EmbeddedApp, path: str, stream: bool) -> None:
    app = dead_upstream_app
    scenario = created_scenario(app)
    before = app.end_offsets()
    body = {**valid_body(path), **({"stream": True} if stream else {})}
    with app.client(scenario) as client:
        response = client.post(path, json=body)
    assert_openai_error(response, 502)
    assert "x-reef-agent-record-id" not in response.headers
    app.assert_nothing_written(before)


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
def test_upstream_timeout_is_504(reef_app: EmbeddedApp, stream: bool) -> None:
    scenario = created_scenario(reef_app)
    before = reef_app.end_offsets()
    slow = f"{marker()} __sleep_{READ_TIMEOUT_S * 3}__"
    with reef_app.client(scenario) as client:
        response = client.post("/v1/chat/completions", json=chat_body(slow, stream=stream))
    assert_openai_error(response, 504)
    assert "x-reef-agent-record-id" not in response.headers
    reef_app.assert_nothing_written(before)


# ---------------------------------------------------------------------------
# Log down: Reef never serves an exchange it cannot record (Kafka: tests/e2e/test_log_down.py)


def test_log_down_is_503_embedded(tmp_path: Path) -> None:
    """A full disk makes the embedded log refuse writes; Reef answers 503 and recovers."""
    with tiny_tmpfs(tmp_path / "tiny") as disk, running_app(disk / "state") as app:
        check_log_down(
            app,
            take_down=lambda: fill_disk(disk / "filler"),
            bring_back=lambda: (disk / "filler").unlink(),
        )
