"""The spans an OTLP receiver wrote, read back from its file exporter's JSON lines.

The collector's file exporter writes each batch it received as one line of OTLP JSON
(``{"resourceSpans": [{"resource": ..., "scopeSpans": [{"spans": [...]}]}]}``): ids are
hex strings, integer attribute values are strings, arrays nest their values.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    """One received span, its attributes decoded to Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    links: tuple[Link, ...]
    status_code: int
    service: str | None


@dataclass(frozen=True)
class OtlpReceiver:
    """A running OTLP/HTTP receiver and the file its exporter writes."""

    endpoint: str
    spans_file: Path

    def spans(self) -> list[Span]:
        """Every span received so far, oldest first."""
        try:
            text = self.spans_file.read_text()
        except FileNotFoundError:
            return []
        out: list[Span] = []
        for line in text.splitlines():
            if line.strip():
                out.extend(_spans_of(json.loads(line)))
        return out

    def wait_for(self, found: Callable[[list[Span]], bool], timeout: float = 20.0) -> list[Span]:
        """The spans received, once ``found`` accepts them (the exporter batches)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans not received in {timeout}s; have {len(spans)}")
            time.sleep(0.2)


def _spans_of(batch: dict[str, Any]) -> list[Span]:
    out = []
    for resource_spans in batch.get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                out.append(_span(span, resource.get("service.name")))
    return out


def _span(raw: dict[str, Any], service: str | None) -> Span:
    links = tuple(
        Link(link["traceId"], link["spanId"], _attributes(link.get("attributes", [])))
        for link in raw.get("links", [])
    )
    return Span(
        name=raw["name"],
        trace_id=raw["traceId"],
        span_id=raw["spanId"],
        parent_span_id=raw.get("parentSpanId", ""),
        kind=int(raw.get("kind", 0)),
        attributes=_attributes(raw.get("attributes", [])),
        links=links,
        status_code=int(raw.get("status", {}).get("code", 0)),
        service=service,
    )


def _attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    return {pair["key"]: _value(pair.get("value", {})) for pair in pairs}


def _value(value: dict[str, Any]) -> Any:
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    return None
