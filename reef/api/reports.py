"""``POST /reef/report`` and ``GET /reef/reports/{id}``: feedback that quotes receipts."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from reef.api import openapi, registry
from reef.api.context import AppContext, context_of
from reef.api.inputs import parse_object, read_body, scenario_header
from reef.api.ratelimit import ReportLimiter
from reef.core.errors import RequestError
from reef.core.events import ReportSubmitted, utc_now
from reef.core.ids import content_hash, new_record_id

router = APIRouter()


@dataclass(frozen=True, slots=True)
class ReportInput:
    """A validated report body (unknown top-level keys are ignored): a score, feedback
    (text or an object, e.g. a correction), or both."""

    report_id: str
    client_chosen: bool
    score: float | None
    feedback: str | dict[str, Any]
    references: list[str]
    metadata: dict[str, Any]

    def content(self) -> dict[str, Any]:
        """What the content hash covers (a scored report's is what it always was)."""
        content: dict[str, Any] = {
            "score": self.score,
            "feedback": self.feedback,
            "references": self.references,
            "metadata": self.metadata,
        }
        if self.score is None:
            del content["score"]
        return content


def validate_report(body: dict[str, Any]) -> ReportInput:
    score = body.get("score")
    if score is not None and (
        isinstance(score, bool) or not isinstance(score, int | float) or not _finite(score)
    ):
        raise RequestError(400, "invalid_score", "score must be a finite number (not a boolean)")
    feedback = body.get("feedback", "")
    if not isinstance(feedback, str | dict):
        raise RequestError(400, "invalid_feedback", "feedback must be a string or an object")
    if score is None and not (feedback.strip() if isinstance(feedback, str) else feedback):
        raise RequestError(
            400, "empty_report", "a report needs a score, feedback (text or an object), or both"
        )
    references = body.get("references", [])
    if not isinstance(references, list) or not all(isinstance(r, str) and r for r in references):
        raise RequestError(
            400, "invalid_references", "references must be a list of receipt strings"
        )
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise RequestError(400, "invalid_metadata", "metadata must be an object")
    chosen = body.get("agent_record_id")
    if chosen is not None and (not isinstance(chosen, str) or not chosen.strip()):
        raise RequestError(
            400, "invalid_agent_record_id", "agent_record_id must be a non-empty string"
        )
    return ReportInput(
        report_id=chosen.strip() if chosen else new_record_id(),
        client_chosen=chosen is not None,
        score=None if score is None else float(score),
        feedback=feedback,
        references=list(references),
        metadata=metadata,
    )


def _finite(number: int | float) -> bool:
    """A finite double (an integer too large for one overflows, it is not an error)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


class ReportDesk:
    """Serialises reports per id within a replica so a resend never appends twice."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    async def submit(
        self, ctx: AppContext, scenario: str, report: ReportInput, reporter: str
    ) -> None:
        lock = self._locks.setdefault(f"{scenario}/{report.report_id}", asyncio.Lock())
        try:
            async with lock:
                await self._submit(ctx, scenario, report, reporter)
        finally:
            if not lock.locked():
                self._locks.pop(f"{scenario}/{report.report_id}", None)

    async def _submit(
        self, ctx: AppContext, scenario: str, report: ReportInput, reporter: str
    ) -> None:
        digest = content_hash(report.content())
        seen = ctx.projection.state.reports.get((scenario, report.report_id))
        if seen is not None:
            if seen.content_hash == digest:
                return  # an identical resend: same answer, nothing new in the log
            raise RequestError(
                409, "conflict", f"report {report.report_id} exists with other content"
            )
        event = ReportSubmitted(
            event_id=report.report_id,
            scenario=scenario,
            occurred_at=utc_now(),
            producer=ctx.producer,
            score=report.score,
            feedback_json=json.dumps(report.feedback),
            references=report.references,
            metadata_json=json.dumps(report.metadata),
            content_hash=digest,
            reporter=reporter,
        )
        position = await ctx.store.append(event)
        await ctx.projection.wait_for(position)


@router.post(
    "/reef/report",
    responses=openapi.errors(400, 401, 403, 404, 409, 413, 429, 503),
    openapi_extra=openapi.declare(body=openapi.REPORT_BODY, scenario_header=True),
)
async def submit_report(request: Request) -> JSONResponse:
    """Record feedback on receipts; 200 once it is durably in the log.

    curl -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      -d '{"score": 1.0, "feedback": "ok", "references": ["<receipt>"]}' \\
      http://127.0.0.1:8900/reef/report

    ``score`` may be left out when ``feedback`` says what was wrong (or carries a
    correction); a recipe that trains on scores skips such a sample (``no_score``).
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "report")
    scenario = scenario_header(request)
    principal.require_scenario(scenario)
    limiter: ReportLimiter = request.app.state.report_limiter
    refusal = limiter.admit(principal.name, scenario)
    if refusal is not None:  # before the body is read: a refused report costs nothing
        raise RequestError(
            429,
            "rate_limited",
            f"too many reports for this {refusal.limit}; retry in {refusal.retry_after_header} s",
            headers={"Retry-After": refusal.retry_after_header},
        )
    report = validate_report(
        parse_object(await read_body(request, ctx.settings.api.max_body_bytes))
    )
    await registry.ensure(ctx, scenario)
    desk: ReportDesk = request.app.state.report_desk
    if ctx.tracing is None:
        await desk.submit(ctx, scenario, report, principal.name)
    else:
        with ctx.tracing.report(
            request.headers,
            scenario=scenario,
            report_id=report.report_id,
            score=report.score,
            references=report.references,
        ):
            await desk.submit(ctx, scenario, report, principal.name)
    return JSONResponse(
        {"agent_record_id": report.report_id, "scenario": scenario, "request_type": "report"}
    )


@router.get(
    "/reef/reports/{report_id}",
    responses=openapi.errors(400, 401, 403, 404),
    openapi_extra=openapi.declare(scenario_header=True),
)
async def report_status(report_id: str, request: Request) -> JSONResponse:
    """A report's fate: pending until the join decides, then accepted or rejected (reason).

    curl -H "Authorization: Bearer $REEF_TOKEN" -H "x-reef-scenario: demo" \\
      http://127.0.0.1:8900/reef/reports/<id>
    """
    ctx = context_of(request)
    principal = ctx.authenticate(request, "report", "read")  # a reporter may follow its fate
    scenario = scenario_header(request)
    principal.require_scenario(scenario)
    seen = ctx.projection.state.reports.get((scenario, report_id))
    if seen is None:
        raise RequestError(
            404, "unknown_report", f"no report {report_id!r} in scenario {scenario!r}"
        )
    fate = ctx.projection.state.fates.get((scenario, report_id))
    return JSONResponse(
        {
            "agent_record_id": report_id,
            "scenario": scenario,
            "status": fate.status if fate else "pending",
            "reason": fate.reason if fate else None,
            "release_id": fate.release_id if fate else None,
        }
    )
