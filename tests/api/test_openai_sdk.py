"""The official ``openai`` SDK against Reef (OpenAI-dialect upstream), buffered calls.

The app ``reef serve`` builds, in process, on a loopback socket (the SDK brings its own
HTTP client; tests/support/embedded_app.py). Against a real ``reef serve`` on each log:
tests/e2e/test_openai_sdk.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.support.api import RECEIPT, marker, unique_scenario
from tests.support.embedded_app import EmbeddedApp


@pytest.fixture
def scenario() -> str:
    return unique_scenario("oai")


@pytest.fixture
def client(reef_app: EmbeddedApp, scenario: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=reef_app.v1_url,
        api_key=reef_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
        timeout=30.0,
    ) as sdk:
        yield sdk


def test_plain_create_returns_the_provider_answer(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hello there"}]
    )
    assert completion.choices[0].message.content == "ok: hello there"
    assert completion.object == "chat.completion"


def test_receipts_are_distinct_per_request(client: openai.OpenAI) -> None:
    receipts = {
        client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"n {i}"}]
        ).headers["x-reef-agent-record-id"]
        for i in range(3)
    }
    assert len(receipts) == 3


def test_models_list(client: openai.OpenAI) -> None:
    ids = [model.id for model in client.models.list()]
    assert "stub-model" in ids


def test_request_body_reaches_the_upstream_unchanged(
    client: openai.OpenAI, reef_app: EmbeddedApp
) -> None:
    word = marker()
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": f"say {word}"},
    ]
    client.chat.completions.create(model="gpt-4o", messages=messages, temperature=0.25)  # type: ignore[arg-type]
    assert reef_app.upstream is not None
    (seen,) = reef_app.upstream.requests(contains=word)
    assert seen["path"] == "/v1/chat/completions"
    assert seen["body"]["messages"] == messages
    assert seen["body"]["temperature"] == 0.25


def test_upstream_key_injected_and_reef_token_not_forwarded(
    client: openai.OpenAI, reef_app: EmbeddedApp
) -> None:
    word = marker()
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": word}])
    assert reef_app.upstream is not None and reef_app.token is not None
    (seen,) = reef_app.upstream.requests(contains=word)
    headers = {name.lower(): value for name, value in seen["headers"]}
    assert headers.get("authorization") == f"Bearer {reef_app.upstream_key}", headers
    assert reef_app.token not in json.dumps(seen), "the Reef token reached the upstream"


def test_tags_are_recorded(client: openai.OpenAI, reef_app: EmbeddedApp, scenario: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "tagged"}],
        extra_headers={"x-reef-tag-Team": "blue", "x-reef-tag-run": "r1"},
    )
    receipt = raw.headers["x-reef-agent-record-id"]
    (event,) = [e for e in reef_app.inference(scenario) if e.event_id == receipt]
    assert event.tags.get("team") == "blue", event.tags
    assert event.tags.get("run") == "r1", event.tags


def test_upstream_rate_limit_is_relayed_as_rate_limit_error(
    client: openai.OpenAI, reef_app: EmbeddedApp, scenario: str
) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "__status_429__"}]
        )
    assert caught.value.status_code == 429
    assert reef_app.inference(scenario) == []


def test_upstream_failure_is_a_502_api_error(
    client: openai.OpenAI, reef_app: EmbeddedApp, scenario: str
) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "__status_500__"}]
        )
    assert caught.value.status_code == 502
    assert isinstance(caught.value.body, dict) and caught.value.body.get("message")
    assert reef_app.inference(scenario) == []


def test_missing_scenario_is_a_bad_request_error(reef_app: EmbeddedApp) -> None:
    with (
        openai.OpenAI(base_url=reef_app.v1_url, api_key=reef_app.token, max_retries=0) as sdk,
        pytest.raises(openai.BadRequestError) as caught,
    ):
        sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 400


def test_wrong_token_is_an_authentication_error(reef_app: EmbeddedApp, scenario: str) -> None:
    with (
        openai.OpenAI(
            base_url=reef_app.v1_url,
            api_key="not-the-token",
            default_headers={"x-reef-scenario": scenario},
            max_retries=0,
        ) as sdk,
        pytest.raises(openai.AuthenticationError),
    ):
        sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])


async def test_async_client(reef_app: EmbeddedApp, scenario: str) -> None:
    async with openai.AsyncOpenAI(
        base_url=reef_app.v1_url,
        api_key=reef_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
    ) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Return exactly: async"}]
        )
    assert RECEIPT.match(raw.headers["x-reef-agent-record-id"])
    assert raw.parse().choices[0].message.content == "async"
