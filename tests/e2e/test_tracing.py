"""OpenTelemetry spans of a traced ``reef serve``, received by a real OpenTelemetry Collector.

The server exports over OTLP/HTTP to the stack's collector (tests/stack_plugin.py,
``otlp_receiver``), whose file exporter writes what it received; the tests read that
back. Requests come through the official ``openai`` SDK and through httpx, with and
without a W3C ``traceparent``; the scripted upstream shows the ``traceparent`` Reef sent it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from reef.testing.servers import UpstreamProcess
from tests.support.api import marker, unique_scenario
from tests.support.otlp import OtlpReceiver, Span
from tests.support.reef_server import ReefServer, launch

CLIENT_KIND = 3  # OTLP's SPAN_KIND_CLIENT
SERVER_KIND = 2
ERROR_STATUS = 2


@pytest.fixture(scope="module")
def traced(
    upstream: UpstreamProcess, otlp_receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReefServer]:
    server = launch(
        "embedded",
        upstream=upstream,
        state_dir=tmp_path_factory.mktemp("traced"),
        env={
            "REEF_OTEL_ENABLED": "true",
            "REEF_OTEL_ENDPOINT": otlp_receiver.endpoint,
            "REEF_OTEL_SERVICE": "reef-e2e-tracing",
        },
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scenario() -> str:
    return unique_scenario("otel")


def _traceparent() -> tuple[str, str, str]:
    """(header, trace id, parent span id) of a sampled W3C trace context."""
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent}-01", trace_id, parent


def _exchange_span(receiver: OtlpReceiver, receipt: str) -> Span:
    def mine(spans: list[Span]) -> list[Span]:
        return [s for s in spans if s.attributes.get("reef.receipt_id") == receipt]

    return mine(receiver.wait_for(lambda spans: bool(mine(spans))))[0]


def _upstream_parent(upstream: UpstreamProcess, word: str) -> tuple[str, str]:
    """(trace id, parent span id) of the sampled ``traceparent`` the upstream received."""
    (request,) = upstream.requests(contains=word)
    values = [str(v) for name, v in request["headers"] if name.lower() == "traceparent"]
    assert len(values) == 1, request["headers"]
    version, trace_id, span_id, flags = values[0].split("-")
    assert version == "00" and int(flags, 16) & 1, values[0]  # sampled
    return trace_id, span_id


def test_an_sdk_exchange_is_a_genai_span_in_the_callers_trace(
    traced: ReefServer, upstream: UpstreamProcess, otlp_receiver: OtlpReceiver, scenario: str
) -> None:
    header, trace_id, parent = _traceparent()
    word = marker()
    with openai.OpenAI(
        base_url=traced.v1_url,
        api_key=traced.token,
        default_headers={"x-reef-scenario": scenario},
        max_retries=0,
    ) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": f"Return exactly: traced {word}"}],
            extra_headers={"traceparent": header},
        )
    completion = raw.parse()
    receipt = raw.headers["x-reef-agent-record-id"]
    span = _exchange_span(otlp_receiver, receipt)
    assert (span.trace_id, span.parent_span_id) == (trace_id, parent)
    assert span.name == "chat gpt-4o" and span.kind == CLIENT_KIND
    assert span.service == "reef-e2e-tracing"
    assert completion.usage is not None
    assert span.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": completion.model,
        "gen_ai.response.id": completion.id,
        "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": completion.usage.completion_tokens,
        "reef.scenario": scenario,
        "reef.receipt_id": receipt,
        "reef.release_id": raw.headers["x-reef-release-id"],
    }
    assert _upstream_parent(upstream, word) == (trace_id, span.span_id)


def test_a_streamed_exchange_without_traceparent_starts_a_trace_the_upstream_joins(
    traced: ReefServer, upstream: UpstreamProcess, otlp_receiver: OtlpReceiver, scenario: str
) -> None:
    word = marker()
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"Return exactly: streamed {word}"}],
    }
    with (
        traced.client(scenario) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        text = "".join(response.iter_text())
    found = re.search(r'agent_record_id"\s*:\s*"([0-9a-f]{32})"', text)
    assert found is not None, text
    receipt = found.group(1)
    span = _exchange_span(otlp_receiver, receipt)
    assert span.parent_span_id == ""
    assert span.name == "chat gpt-4o-mini"
    assert span.attributes["gen_ai.response.id"].startswith("chatcmpl-")
    (record,) = traced.inference(scenario)
    assert record.output_tokens is not None
    assert span.attributes["gen_ai.usage.output_tokens"] == record.output_tokens
    assert span.attributes["gen_ai.usage.input_tokens"] == record.input_tokens
    assert _upstream_parent(upstream, word) == (span.trace_id, span.span_id)


def test_a_failed_upstream_call_ends_its_span_as_an_error(
    traced: ReefServer, otlp_receiver: OtlpReceiver, scenario: str
) -> None:
    header, trace_id, _ = _traceparent()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "__status_500__"}]}
    with traced.client(scenario) as client:
        response = client.post("/v1/chat/completions", json=body, headers={"traceparent": header})
    assert response.status_code == 502
    spans = otlp_receiver.wait_for(lambda found: any(s.trace_id == trace_id for s in found))
    (span,) = [s for s in spans if s.trace_id == trace_id]
    assert span.status_code == ERROR_STATUS
    assert span.attributes["error.type"] == "RequestError"
    assert span.attributes["reef.scenario"] == scenario


def test_a_report_span_links_the_exchanges_it_quotes(
    traced: ReefServer, otlp_receiver: OtlpReceiver, scenario: str
) -> None:
    receipts = []
    with traced.client(scenario) as client:
        for n in range(2):
            exchange_header, _, _ = _traceparent()
            answer = client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": f"hi {n}"}]},
                headers={"traceparent": exchange_header},
            )
            receipts.append(answer.headers["x-reef-agent-record-id"])
        header, trace_id, parent = _traceparent()
        report = client.post(
            "/reef/report",
            json={"score": 0.5, "feedback": "fine", "references": receipts},
            headers={"traceparent": header},
        )
    assert report.status_code == 200, report.text
    report_id = report.json()["agent_record_id"]
    exchanges = {receipt: _exchange_span(otlp_receiver, receipt) for receipt in receipts}
    spans = otlp_receiver.wait_for(
        lambda found: any(s.attributes.get("reef.report_id") == report_id for s in found)
    )
    (span,) = [s for s in spans if s.attributes.get("reef.report_id") == report_id]
    assert (span.name, span.kind) == ("reef.report", SERVER_KIND)
    assert (span.trace_id, span.parent_span_id) == (trace_id, parent)
    assert span.attributes["reef.report.references"] == receipts
    assert span.attributes["reef.report.score"] == 0.5
    linked = {link.attributes["reef.receipt_id"]: link for link in span.links}
    assert set(linked) == set(receipts)
    for receipt, exchange in exchanges.items():
        assert (linked[receipt].trace_id, linked[receipt].span_id) == (
            exchange.trace_id,
            exchange.span_id,
        )


def test_spans_reach_the_receiver_only_from_a_traced_server(
    upstream: UpstreamProcess, otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """The default server (tracing off) sends nothing, traceparent or not."""
    plain = launch("embedded", upstream=upstream, state_dir=tmp_path)
    header, trace_id, _ = _traceparent()
    try:
        with plain.client(unique_scenario("otel-off")) as client:
            answer = client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
                headers={"traceparent": header},
            )
            assert answer.status_code == 200
    finally:
        plain.stop()  # a traced server would have flushed its spans by now
    assert all(span.trace_id != trace_id for span in otlp_receiver.spans())
