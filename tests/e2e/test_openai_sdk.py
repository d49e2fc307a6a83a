"""The official ``openai`` SDK against a real ``reef serve`` on each log (embedded; Kafka),
OpenAI-dialect upstream: one chat completion and one Responses call, each receipt in the
log with the release that served it. Everything else the SDK meets (errors, tags, the
upstream's view, the async client) is tests/api/test_openai_sdk.py, in process."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.api import RECEIPT, unique_scenario
from tests.support.reef_server import ReefServer


@pytest.fixture
def scenario() -> str:
    return unique_scenario("oai")


@pytest.fixture
def client(reef_server: ReefServer, scenario: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=reef_server.v1_url,
        api_key=reef_server.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
        timeout=30.0,
    ) as sdk:
        yield sdk


def test_chat_completion_receipt_from_raw_response(
    client: openai.OpenAI, reef_server: ReefServer, scenario: str
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Return exactly: forty two"}]
    )
    receipt = raw.headers["x-reef-agent-record-id"]
    release = raw.headers["x-reef-release-id"]
    completion = raw.parse()
    assert RECEIPT.match(receipt), receipt
    assert release
    assert completion.choices[0].message.content == "forty two"
    assert completion.usage is not None and completion.usage.completion_tokens == 2
    (event,) = reef_server.inference(scenario)
    assert event.event_id == receipt
    assert event.release_id == release


def test_responses_api_buffered(
    client: openai.OpenAI, reef_server: ReefServer, scenario: str
) -> None:
    raw = client.responses.with_raw_response.create(
        model="gpt-4o", input="Return exactly: via responses"
    )
    receipt = raw.headers["x-reef-agent-record-id"]
    response = raw.parse()
    assert RECEIPT.match(receipt), receipt
    assert response.output_text == "via responses"
    (event,) = reef_server.inference(scenario)
    assert event.event_id == receipt
    assert event.release_id == raw.headers["x-reef-release-id"]
