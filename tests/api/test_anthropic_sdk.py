"""The official ``anthropic`` SDK against Reef (Anthropic-dialect upstream), buffered calls.

The app ``reef serve`` builds, in process, on a loopback socket (the SDK brings its own
HTTP client; tests/support/embedded_app.py). Against a real ``reef serve`` on each log:
tests/e2e/test_anthropic_sdk.py."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import CacheControlEphemeralParam, MessageParam

from tests.support.api import RECEIPT, marker, unique_scenario
from tests.support.embedded_app import EmbeddedApp

MODEL = "claude-test"


@pytest.fixture(scope="module")
def app_options() -> dict[str, Any]:
    return {"dialect": "anthropic"}


@pytest.fixture
def scenario() -> str:
    return unique_scenario("ant")


@pytest.fixture
def client(reef_app: EmbeddedApp, scenario: str) -> Iterator[anthropic.Anthropic]:
    """The SDK's own ``api_key`` (sent as ``x-api-key``) carries the Reef token."""
    with anthropic.Anthropic(
        base_url=reef_app.base_url,
        api_key=reef_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
        timeout=30.0,
    ) as sdk:
        yield sdk


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_bearer_token_works_too(reef_app: EmbeddedApp, scenario: str) -> None:
    with anthropic.Anthropic(
        base_url=reef_app.base_url,
        auth_token=reef_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
    ) as sdk:
        raw = sdk.messages.with_raw_response.create(
            model=MODEL,
            max_tokens=64,
            messages=user("Return exactly: bearer"),  # type: ignore[arg-type]
        )
    assert RECEIPT.match(raw.headers["x-reef-agent-record-id"])
    assert raw.parse().content[0].text == "bearer"  # type: ignore[union-attr]


def test_content_blocks_and_system_prompt(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=64,
        system="be terse",
        messages=[{"role": "user", "content": [{"type": "text", "text": "blocks here"}]}],
    )
    assert message.content[0].text == "ok: blocks here"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"


def test_count_tokens(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=user("one two three four"))  # type: ignore[arg-type]
    assert counted.input_tokens == 4


def test_upstream_key_injected_as_x_api_key_and_reef_token_not_forwarded(
    client: anthropic.Anthropic, reef_app: EmbeddedApp
) -> None:
    word = marker()
    client.messages.create(model=MODEL, max_tokens=64, messages=user(word))  # type: ignore[arg-type]
    assert reef_app.upstream is not None and reef_app.token is not None
    (seen,) = reef_app.upstream.requests(contains=word)
    assert seen["path"] == "/v1/messages"
    headers = {name.lower(): value for name, value in seen["headers"]}
    assert headers.get("x-api-key") == reef_app.upstream_key, headers
    assert reef_app.token not in json.dumps(seen), "the Reef token reached the upstream"
    assert seen["body"]["messages"] == user(word)


def test_a_prompt_caching_request_reaches_the_provider_as_the_sdk_sent_it(
    reef_app: EmbeddedApp, scenario: str
) -> None:
    """cache_control blocks in system, tools and messages and the beta header: the
    provider gets the SDK's own bytes, not a re-serialisation."""
    sent: list[httpx2.Request] = []
    word = marker()
    with (
        httpx2.Client(event_hooks={"request": [sent.append]}) as http,  # the SDK's httpx
        anthropic.Anthropic(
            base_url=reef_app.base_url,
            api_key=reef_app.token,
            default_headers={"x-reef-scenario": scenario},
            max_retries=0,
            http_client=http,
        ) as sdk,
    ):
        cached: CacheControlEphemeralParam = {"type": "ephemeral"}
        question: MessageParam = {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": cached}],
        }
        message = sdk.messages.create(
            model=MODEL,
            max_tokens=64,
            system=[{"type": "text", "text": f"Règles — {word}", "cache_control": cached}],
            tools=[
                {
                    "name": "lookup",
                    "description": "Look up a word",
                    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                    "cache_control": cached,
                }
            ],
            messages=[question],
            extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"},
        )
    assert message.content[0].text == "ok: hi"  # type: ignore[union-attr]
    assert reef_app.upstream is not None
    (seen,) = reef_app.upstream.requests(contains=word)
    assert seen["raw"].encode() == sent[-1].content
    headers = {name.lower(): value for name, value in seen["headers"]}
    assert headers["anthropic-beta"] == "prompt-caching-2024-07-31"


def test_upstream_rate_limit_is_relayed(
    client: anthropic.Anthropic, reef_app: EmbeddedApp, scenario: str
) -> None:
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model=MODEL, max_tokens=64, messages=user("__status_429__"))  # type: ignore[arg-type]
    assert caught.value.status_code == 429
    assert reef_app.inference(scenario) == []


def test_upstream_failure_is_a_502_in_anthropic_shape(
    client: anthropic.Anthropic, reef_app: EmbeddedApp, scenario: str
) -> None:
    with pytest.raises(anthropic.InternalServerError) as caught:
        client.messages.create(model=MODEL, max_tokens=64, messages=user("__status_500__"))  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert reef_app.inference(scenario) == []


def test_wrong_api_key_is_an_authentication_error(reef_app: EmbeddedApp, scenario: str) -> None:
    with (
        anthropic.Anthropic(
            base_url=reef_app.base_url,
            api_key="not-the-token",
            default_headers={"x-reef-scenario": scenario},
            max_retries=0,
        ) as sdk,
        pytest.raises(anthropic.AuthenticationError) as caught,
    ):
        sdk.messages.create(model=MODEL, max_tokens=64, messages=user("x"))  # type: ignore[arg-type]
    assert isinstance(caught.value.body, dict) and caught.value.body.get("type") == "error"


def test_tags_are_recorded(
    client: anthropic.Anthropic, reef_app: EmbeddedApp, scenario: str
) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        messages=user("tagged"),  # type: ignore[arg-type]
        extra_headers={"x-reef-tag-Agent": "planner"},
    )
    receipt = raw.headers["x-reef-agent-record-id"]
    (event,) = [e for e in reef_app.inference(scenario) if e.event_id == receipt]
    assert event.tags.get("agent") == "planner", event.tags


async def test_async_client(reef_app: EmbeddedApp, scenario: str) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=reef_app.base_url,
        api_key=reef_app.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
    ) as sdk:
        raw = await sdk.messages.with_raw_response.create(
            model=MODEL,
            max_tokens=64,
            messages=user("Return exactly: async claude"),  # type: ignore[arg-type]
        )
    assert RECEIPT.match(raw.headers["x-reef-agent-record-id"])
    parsed: object = raw.parse()  # awaitable or not, depending on the SDK's version
    message = await parsed if inspect.isawaitable(parsed) else parsed
    assert isinstance(message, anthropic.types.Message), message
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock) and block.text == "async claude"
