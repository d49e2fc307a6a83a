"""Exchange and report spans over the OpenTelemetry SDK, exported over OTLP/HTTP.

Off by default (``REEF_OTEL_ENABLED``); when off, nothing here is imported on the
request path and :class:`~reef.api.context.AppContext` holds no :class:`Tracing`, so the
inference routes pay one ``is None`` test. When on, :func:`open_tracing` builds a tracer
provider of the process's own (the global one is left alone) with a batch processor,
which exports from its own thread; shutdown flushes what is queued.

Spans:

- an exchange: kind CLIENT, a child of the incoming W3C ``traceparent`` (a new trace
  without one), named and attributed after the GenAI conventions
  (:mod:`reef.observability.genai`); the upstream request carries a ``traceparent``
  naming this span, so the provider's own span joins the same trace.
- a report (``POST /reef/report``): a child of its own request's ``traceparent``, with a
  link to the span of each quoted receipt this process served. Those span contexts are
  remembered in a bounded, in-process :class:`SpanIndex` (receipt → span context, the
  newest :data:`INDEX_SIZE`); a receipt served by another process (another ``--workers``
  worker, replica, or before a restart) gets no link, and both spans still carry
  ``reef.receipt_id`` for a backend to join on.
- a training step (the trainer running in this process, ``reef serve`` on the embedded
  log): an INTERNAL span ``reef.train`` around one batch, from training to the chain's
  decision, with the release it committed (or the reason it did not) and a link to the
  report span of each sample's report, found the same way (report id → span context).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from reef.core.errors import ConfigError
from reef.core.events import InferenceRecorded
from reef.observability import genai
from reef.settings import OtelSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanContext, Tracer

#: spans (exchanges, reports) that a later span can link to, newest kept, per index
INDEX_SIZE: Final = 65_536
#: how long the batch processor lets finished spans gather before it exports them
EXPORT_DELAY_MS: Final = 500


class SpanIndex:
    """The span contexts of the newest spans by key (exchanges by receipt, reports by
    scenario and report id), for the spans that link to them."""

    def __init__(self, size: int = INDEX_SIZE) -> None:
        self._size = size
        self._contexts: OrderedDict[str, SpanContext] = OrderedDict()

    def remember(self, key: str, context: SpanContext) -> None:
        self._contexts[key] = context
        if len(self._contexts) > self._size:
            self._contexts.popitem(last=False)

    def get(self, key: str) -> SpanContext | None:
        return self._contexts.get(key)


class ExchangeSpan:
    """One exchange's span: described once bound, ended once recorded (or failed)."""

    __slots__ = ("_ended", "_index", "_provider", "_span")

    def __init__(self, span: Span, index: SpanIndex, provider: str) -> None:
        self._span = span
        self._index = index
        self._provider = provider
        self._ended = False

    def describe(
        self, route: str, *, scenario: str, receipt: str, release: str, model: str | None
    ) -> None:
        """Name the span and attach what the bound exchange knows; index it by receipt."""
        self._span.update_name(genai.span_name(route, model))
        attributes = genai.request_attributes(
            route, self._provider, scenario=scenario, receipt=receipt, release=release, model=model
        )
        self._span.set_attributes(attributes)
        self._index.remember(receipt, self._span.get_span_context())

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Name this span as the parent of the upstream request (W3C ``traceparent``)."""
        from opentelemetry.trace import set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(self._span))

    def recorded(self, record: InferenceRecorded, answer: Mapping[str, Any] | None) -> None:
        """End with the record's usage and outcome (an incomplete record is an error)."""
        if self._ended:
            return
        attributes = genai.response_attributes(record, answer)
        self._span.set_attributes(attributes)
        if genai.ERROR_TYPE in attributes:
            self._end_error(record.error or f"upstream answered {record.status}")
        else:
            self._end()

    def failed(self, exc: BaseException) -> None:
        """End with the error that stopped the exchange before it was recorded."""
        if self._ended:
            return
        self._span.set_attribute(genai.ERROR_TYPE, type(exc).__qualname__)
        self._end_error(str(exc) or type(exc).__qualname__)

    def answered(self, status: int) -> None:
        """End an exchange answered without a record (a relayed provider error); once
        recorded, nothing is left to do."""
        if self._ended:
            return
        if status >= 400:
            self._span.set_attribute(genai.ERROR_TYPE, str(status))
            self._end_error(f"upstream answered {status}")
        else:
            self._end()

    def _end_error(self, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, description))
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()


class TrainingSpan:
    """One training step's span: what the chain decided on its proposal."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def decided(self, *, committed: bool, release_id: str | None, reason: str | None) -> None:
        """The chain's answer to a proposal (the last one counts after a rebase)."""
        if committed and release_id:
            self._span.set_attribute(genai.RELEASE, release_id)
        elif reason:
            self._span.set_attribute(genai.REJECTED, reason)


class Tracing:
    """The process's tracer: starts exchange, report and training spans, and remembers
    exchanges and reports for the spans that link to them."""

    def __init__(self, tracer: Tracer, provider: str) -> None:
        self._tracer = tracer
        #: the upstream's dialect names the provider (gen_ai.provider.name)
        self.provider = provider
        self.index = SpanIndex()
        #: report spans, by "<scenario>/<report id>" (report ids are unique per scenario)
        self.reports = SpanIndex()

    def exchange(self, headers: Mapping[str, str], route: str) -> ExchangeSpan:
        """Start an exchange's span as a child of the request's ``traceparent``."""
        from opentelemetry.trace import SpanKind

        span = self._tracer.start_span(
            genai.span_name(route, None),
            context=_parent(headers),
            kind=SpanKind.CLIENT,
            attributes={genai.OPERATION: genai.OPERATIONS.get(route, "chat")},
        )
        return ExchangeSpan(span, self.index, self.provider)

    @contextlib.contextmanager
    def report(
        self,
        headers: Mapping[str, str],
        *,
        scenario: str,
        report_id: str,
        score: float | None,
        references: list[str],
    ) -> Iterator[None]:
        """A report's span around its submission, linked to the quoted exchanges' spans."""
        from opentelemetry.trace import Link, SpanKind

        links = [
            Link(context, {genai.RECEIPT: receipt})
            for receipt in references
            if (context := self.index.get(receipt)) is not None
        ]
        attributes: genai.Attributes = {
            genai.SCENARIO: scenario,
            genai.REPORT: report_id,
            genai.REFERENCES: references,
        }
        if score is not None:  # a report of feedback alone has none
            attributes[genai.SCORE] = score
        with self._tracer.start_as_current_span(
            "reef.report",
            context=_parent(headers),
            kind=SpanKind.SERVER,
            attributes=attributes,
            links=links,
        ) as span:
            self.reports.remember(f"{scenario}/{report_id}", span.get_span_context())
            yield

    @contextlib.contextmanager
    def training(self, scenario: str, samples: Sequence[tuple[str, str]]) -> Iterator[TrainingSpan]:
        """A training step's span over ``samples`` ((sample id, report id) pairs), linked
        to the spans of their reports."""
        from opentelemetry.trace import Link, SpanKind

        links = [
            Link(context, {genai.SAMPLE: sample_id, genai.REPORT: report_id})
            for sample_id, report_id in samples
            if (context := self.reports.get(f"{scenario}/{report_id}")) is not None
        ]
        attributes: genai.Attributes = {genai.SCENARIO: scenario, genai.SAMPLES: len(samples)}
        with self._tracer.start_as_current_span(
            "reef.train", kind=SpanKind.INTERNAL, attributes=attributes, links=links
        ) as span:
            yield TrainingSpan(span)


def _parent(headers: Mapping[str, str]) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(headers)


def _provider(otel: OtelSettings) -> TracerProvider:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(
            "otel_enabled needs the OpenTelemetry SDK: pip install 'reef[otel]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": otel.service}))
    exporter = OTLPSpanExporter(endpoint=f"{otel.endpoint.rstrip('/')}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=EXPORT_DELAY_MS))
    return provider


@contextlib.asynccontextmanager
async def open_tracing(otel: OtelSettings, provider_name: str) -> AsyncIterator[Tracing | None]:
    """The process's :class:`Tracing` while it serves (None when tracing is off);
    finished spans still queued are exported on exit, off the event loop."""
    if not otel.enabled:
        yield None
        return
    provider = _provider(otel)
    try:
        yield Tracing(provider.get_tracer("reef"), provider_name)
    finally:
        await asyncio.to_thread(provider.shutdown)
