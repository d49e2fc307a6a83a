"""Reef never serves an exchange it cannot record: the check, against a running
deployment whose log a test takes down (a full disk under the embedded log, a killed
Kafka broker) and maybe brings back.

While the log is down an inference gets 503 in the OpenAI shape with no receipt, and a
report 503 in Reef's; once it is back, inference is served again, and the log holds
exactly the exchanges answered with a receipt (none of the refused one's text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import httpx
import pytest

from reef.core.events import InferenceRecorded
from tests.support.api import (
    assert_openai_error,
    assert_reef_error,
    chat_body,
    marker,
    unique_scenario,
)

REPORT = {"score": 1.0, "feedback": "fine", "references": []}


class RecordingApi(Protocol):
    """A deployment's API and a reader of its log (a ``reef serve``, or the app in process)."""

    kind: str

    def client(
        self, scenario: str | None = None, token: str | None = None, timeout: float = ...
    ) -> httpx.Client: ...

    def inference(self, scenario: str) -> list[InferenceRecorded]: ...


def check_log_down(
    api: RecordingApi,
    *,
    take_down: Callable[[], object],
    bring_back: Callable[[], object] | None,
) -> None:
    """Serve, take the log down, see the refusals, bring it back (if given) and serve."""
    scenario, word = unique_scenario("down"), marker()
    # generous: an append is acknowledged or refused within the log's own timeouts
    with api.client(scenario, timeout=60.0) as client:
        first = client.post("/v1/chat/completions", json=chat_body("before"))
        assert first.status_code == 200, first.text
        take_down()
        try:
            down = client.post("/v1/chat/completions", json=chat_body(f"{word} while down"))
        except httpx.TimeoutException:
            pytest.fail(f"no answer within 60 s while the {api.kind} log was down (want 503)")
        assert_openai_error(down, 503)
        assert "x-reef-agent-record-id" not in down.headers
        assert_reef_error(client.post("/reef/report", json=REPORT), 503)
        if bring_back is None:
            return
        bring_back()
        again = client.post("/v1/chat/completions", json=chat_body("after"))
        assert again.status_code == 200, again.text
    events = api.inference(scenario)
    assert [e.event_id for e in events] == [
        first.headers["x-reef-agent-record-id"],
        again.headers["x-reef-agent-record-id"],
    ]
    assert not any(word in (e.request_json or "") for e in events)
