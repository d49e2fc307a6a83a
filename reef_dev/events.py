"""Synthetic events, built as the API and the processors would write them.

Exchanges (:func:`inference`) and reports (:func:`report`) for the join, scenario
creations (:func:`created`) and release proposals (:func:`proposal`) for the release
chain. Deterministic in their arguments: tests and benchmarks build the same workloads.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from reef.core.events import InferenceRecorded, ReleaseProposed, ReportSubmitted, ScenarioCreated
from reef.core.ids import EMPTY_CONTENT_ID, content_hash, derived_id, release_id, scenario_tag


def receipt(scenario: str, n: int) -> str:
    """A receipt of ``scenario`` (its 8-hex tag + 24 hex), deterministic in ``n``."""
    return scenario_tag(scenario) + f"{n:024x}"


def chat_request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "m", "messages": messages}


def chat_response(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


def inference(
    scenario: str,
    rec: str,
    at: datetime,
    *,
    release: str = "rel-a",
    complete: bool = True,
    request: Any = None,
    response: Any = None,
    producer: str = "test",
    latency_ms: float = 1.0,
    upstream_latency_ms: float = 1.0,
) -> InferenceRecorded:
    """An exchange of ``scenario`` with receipt ``rec``; an incomplete one has no response
    (status 502). ``request`` / ``response`` default to a chat naming ``rec``."""
    request = request if request is not None else chat_request([{"role": "user", "content": rec}])
    response = response if response is not None else chat_response(f"answer {rec}")
    return InferenceRecorded(
        event_id=rec,
        scenario=scenario,
        occurred_at=at,
        producer=producer,
        dialect="openai",
        route="/v1/chat/completions",
        release_id=release,
        stream=False,
        status=200 if complete else 502,
        complete=complete,
        latency_ms=latency_ms,
        upstream_latency_ms=upstream_latency_ms,
        request_json=json.dumps(request),
        response_json=json.dumps(response) if complete else None,
    )


def report(
    scenario: str,
    report_id: str,
    refs: list[str],
    at: datetime,
    *,
    score: float = 1.0,
    feedback: Any = "good",
    producer: str = "test",
) -> ReportSubmitted:
    """A report of ``scenario`` quoting the receipts ``refs``, with its content hash."""
    content = {"score": score, "feedback": feedback, "references": refs, "metadata": {}}
    return ReportSubmitted(
        event_id=report_id,
        scenario=scenario,
        occurred_at=at,
        producer=producer,
        score=score,
        feedback_json=json.dumps(feedback),
        references=list(refs),
        metadata_json="{}",
        content_hash=content_hash(content),
    )


def created(scenario: str, at: datetime, seed: str | None = None) -> ScenarioCreated:
    """The creation of ``scenario`` (its event and initial release ids derived)."""
    return ScenarioCreated(
        event_id=derived_id("scenario", scenario),
        scenario=scenario,
        occurred_at=at,
        producer="test",
        recipe="core",
        initial_release_id=release_id(scenario, None, EMPTY_CONTENT_ID, "creation"),
        seed_content_id=seed,
    )


def proposal(
    scenario: str,
    proposal_id: str,
    parent: str | None,
    content: str,
    at: datetime,
    *,
    operation: str = "training",
    target: str | None = None,
    pending: bool = False,
    samples: list[str] | None = None,
    event_id: str | None = None,
) -> ReleaseProposed:
    """A proposal of ``content`` on ``parent`` (None: on nothing)."""
    return ReleaseProposed(
        event_id=event_id or f"ev-{proposal_id}",
        scenario=scenario,
        occurred_at=at,
        producer="test",
        proposal_id=proposal_id,
        content_id=content,
        operation=operation,
        parent_release_id=parent,
        target_release_id=target,
        metrics_json=json.dumps({"p": proposal_id}),
        sample_ids=list(samples or []),
        pending=pending,
    )
