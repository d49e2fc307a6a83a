"""Exchange and report spans: GenAI attributes, W3C propagation, links, and no cost when off.

Spans go to the SDK's in-memory exporter here; tests/e2e/test_tracing.py sends them to
a real OpenTelemetry Collector.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from reef.observability import genai
from reef.observability.tracing import SpanIndex, Tracing, open_tracing
from reef.settings import OtelSettings
from reef_dev.events import inference

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"


@pytest.fixture
def exported() -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Tracing(provider.get_tracer("test"), "anthropic"), exporter
    provider.shutdown()


def _only(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = exporter.get_finished_spans()
    return span


def test_an_exchange_span_is_a_child_of_the_traceparent_and_parents_the_upstream(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    span = tracing.exchange({"traceparent": TRACEPARENT}, "/v1/messages")
    span.describe("/v1/messages", scenario="s", receipt="r1", release="rel", model="claude-x")
    upstream: dict[str, str] = {}
    span.inject(upstream)
    record = replace(inference("s", "r1", datetime.now(UTC)), input_tokens=7, output_tokens=3)
    span.recorded(record, {"type": "message", "message": {"id": "msg_1", "model": "claude-y"}})
    done = _only(exporter)
    assert done.name == "chat claude-x" and done.kind is SpanKind.CLIENT
    assert done.parent is not None and format(done.parent.span_id, "016x") == PARENT
    assert format(done.context.trace_id, "032x") == TRACE
    assert upstream["traceparent"] == f"00-{TRACE}-{done.context.span_id:016x}-01"
    assert dict(done.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-x",
        "gen_ai.response.id": "msg_1",
        "gen_ai.response.model": "claude-y",
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 3,
        "reef.scenario": "s",
        "reef.receipt_id": "r1",
        "reef.release_id": "rel",
    }
    assert done.status.status_code is StatusCode.UNSET


def test_an_incomplete_record_ends_its_span_as_an_error_once(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    span = tracing.exchange({}, "/v1/chat/completions")
    record = replace(
        inference("s", "r2", datetime.now(UTC), complete=False), error="client disconnected"
    )
    span.recorded(record, None)
    span.answered(200)  # after the record: nothing more
    done = _only(exporter)
    assert done.parent is None
    assert done.status.status_code is StatusCode.ERROR
    assert done.status.description == "client disconnected"
    assert (done.attributes or {})[genai.ERROR_TYPE] == "incomplete"


def test_a_report_span_links_only_the_exchanges_this_process_served(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    exchange = tracing.exchange({}, "/v1/chat/completions")
    exchange.describe("/v1/chat/completions", scenario="s", receipt="r3", release="x", model=None)
    exchange.answered(200)
    with tracing.report(
        {"traceparent": TRACEPARENT},
        scenario="s",
        report_id="rep",
        score=1.0,
        references=["r3", "elsewhere"],
    ):
        pass
    served, report = exporter.get_finished_spans()
    assert report.kind is SpanKind.SERVER
    assert format(report.context.trace_id, "032x") == TRACE
    (link,) = report.links
    assert link.context == served.context
    assert dict(link.attributes or {}) == {"reef.receipt_id": "r3"}
    assert (report.attributes or {})["reef.report.references"] == ("r3", "elsewhere")


def test_the_span_index_keeps_the_newest_receipts() -> None:
    index = SpanIndex(size=2)
    contexts = [object() for _ in range(3)]
    for n, context in enumerate(contexts):
        index.remember(f"r{n}", context)  # type: ignore[arg-type]
    assert index.get("r0") is None
    assert index.get("r2") is contexts[2]


def test_response_attributes_read_an_openai_answer_and_flag_an_error_status() -> None:
    record = replace(inference("s", "r", datetime.now(UTC)), status=429, input_tokens=1)
    attributes = genai.response_attributes(record, {"id": "chatcmpl-1", "model": "m"})
    assert attributes == {
        "gen_ai.usage.input_tokens": 1,
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.model": "m",
        "error.type": "429",
    }


async def test_tracing_off_opens_nothing() -> None:
    async with open_tracing(OtelSettings(), "openai") as tracing:
        assert tracing is None


def test_serving_with_tracing_off_never_imports_the_sdk() -> None:
    check = (
        "import sys, reef.cli, reef.wiring, reef.api.inference, reef.api.reports, trainers.runner\n"
        "print(','.join(m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
        "'opentelemetry.exporter'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""
