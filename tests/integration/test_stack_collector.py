"""The local stack's OTLP receiver (an OpenTelemetry Collector): built once, restartable,
and what it receives is what its file exporter writes."""

from __future__ import annotations

import secrets

import httpx
import pytest

from reef_dev.stack import collector
from reef_dev.stack.paths import StackSettings
from tests.support.otlp import OtlpReceiver


def _export(endpoint: str, name: str) -> str:
    """Send one span as OTLP/HTTP JSON, as any OTLP client would; return its trace id."""
    trace_id = secrets.token_hex(16)
    span = {
        "traceId": trace_id,
        "spanId": secrets.token_hex(8),
        "name": name,
        "kind": 3,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000100000000",
        "attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}}],
    }
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    response = httpx.post(f"{endpoint}/v1/traces", json=body, timeout=10.0)
    response.raise_for_status()
    return trace_id


def test_a_second_up_builds_nothing(
    otlp_receiver: OtlpReceiver,
    reef_stack_settings: StackSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no go: only the build already there
    assert (
        collector.ensure_built(reef_stack_settings)
        == collector.build_for(reef_stack_settings).binary
    )
    assert collector.up(reef_stack_settings) == otlp_receiver.endpoint


def test_a_restarted_collector_writes_what_it_receives(
    otlp_receiver: OtlpReceiver, reef_stack_settings: StackSettings
) -> None:
    collector.down(reef_stack_settings)
    assert not collector.service_for(reef_stack_settings).is_running()
    assert collector.up(reef_stack_settings) == otlp_receiver.endpoint
    trace_id = _export(otlp_receiver.endpoint, "probe")
    spans = otlp_receiver.wait_for(lambda found: any(s.trace_id == trace_id for s in found))
    (span,) = [s for s in spans if s.trace_id == trace_id]
    assert (span.name, span.kind) == ("probe", 3)
    assert span.attributes == {"gen_ai.usage.input_tokens": 12}
