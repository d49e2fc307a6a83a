"""The official ``anthropic`` SDK against a real ``reef serve`` on each log (embedded;
Kafka), Anthropic-dialect upstream: one message, its receipt in the log with the release
that served it. Everything else the SDK meets (bearer tokens, token counting, prompt
caching, errors, tags, the async client) is tests/api/test_anthropic_sdk.py, in process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.support.api import RECEIPT, unique_scenario
from tests.support.reef_server import ReefServer

MODEL = "claude-test"


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    return {"dialect": "anthropic"}


@pytest.fixture
def scenario() -> str:
    return unique_scenario("ant")


@pytest.fixture
def client(reef_server: ReefServer, scenario: str) -> Iterator[anthropic.Anthropic]:
    """The SDK's own ``api_key`` (sent as ``x-api-key``) carries the Reef token."""
    with anthropic.Anthropic(
        base_url=reef_server.base_url,
        api_key=reef_server.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
        timeout=30.0,
    ) as sdk:
        yield sdk


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_message_receipt_from_raw_response(
    client: anthropic.Anthropic, reef_server: ReefServer, scenario: str
) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        messages=user("Return exactly: hello claude"),  # type: ignore[arg-type]
    )
    receipt = raw.headers["x-reef-agent-record-id"]
    release = raw.headers["x-reef-release-id"]
    message = raw.parse()
    assert RECEIPT.match(receipt), receipt
    assert release
    assert message.content[0].type == "text"
    assert message.content[0].text == "hello claude"
    assert message.usage.output_tokens == 2
    (event,) = reef_server.inference(scenario)
    assert event.event_id == receipt
    assert event.release_id == release
