"""The golden events: one event per event type, as an *old* writer produced them.

``tests/golden/<Type>.bin`` hold them encoded (written by ``python -m
tests.golden.generate``); tests/unit/reef/test_schema_compat.py decodes them with the
*current* reader schemas. Rules for editing :func:`golden_events`:

* never change a value that is already there (the .bin files hold it);
* a new event type gets a new entry (then run the generator to write its file);
* a field added to a schema later is left at its default here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from reef.core.events import (
    EVENT_TYPES,
    EngineLoaded,
    EngineLoadFailed,
    Event,
    InferenceRecorded,
    RecordErased,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    ReportRejected,
    ReportSubmitted,
    RolloutDecided,
    RolloutStarted,
    SampleJoined,
    ScenarioCreated,
    SessionExpired,
    TurnCompleted,
    TurnJudged,
)

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
_AT = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


class _Envelope(TypedDict):
    """The fields every event shares."""

    scenario: str
    occurred_at: datetime
    producer: str


_ENV: _Envelope = {"scenario": "golden-scenario", "occurred_at": _AT, "producer": "golden-host-1"}


def golden_events() -> dict[str, Event]:
    """The deterministic event of every type whose encoding is in ``<Type>.bin``."""
    events: list[Event] = [
        ScenarioCreated(
            event_id="evt-scenario-created",
            **_ENV,
            recipe="core",
            initial_release_id="rel-0",
            seed_content_id="sha256:seed",
        ),
        InferenceRecorded(
            event_id="evt-inference",
            **_ENV,
            dialect="openai",
            route="/v1/chat/completions",
            release_id="rel-1",
            stream=True,
            status=200,
            complete=True,
            latency_ms=123.5,
            upstream_latency_ms=100.25,
            served_release_id="rel-1",
            weight_version="w-7",
            model="gpt-test",
            request_json='{"messages":[{"role":"user","content":"héllo ✓"}]}',
            response_json='{"choices":[{"message":{"content":"hi"}}]}',
            input_tokens=12,
            output_tokens=3,
            tags={"team": "search", "ünicode": "✓"},
        ),
        ReportSubmitted(
            event_id="evt-report",
            **_ENV,
            score=0.75,
            feedback_json='{"comment":"good"}',
            references=["evt-inference"],
            metadata_json="{}",
            content_hash="sha256:abc",
            reporter="alice",
        ),
        SampleJoined(
            event_id="evt-sample",
            **_ENV,
            report_id="evt-report",
            references=["evt-inference"],
            trajectory_json="[]",
            score=0.75,
            feedback_json="{}",
            metadata_json="{}",
            release_ids=["rel-1"],
        ),
        ReportRejected(
            event_id="evt-report-rejected",
            **_ENV,
            report_id="evt-report-2",
            reason="unknown-reference",
            detail="evt-missing",
        ),
        ReleaseProposed(
            event_id="evt-proposed",
            **_ENV,
            proposal_id="prop-1",
            content_id="sha256:c1",
            operation="training",
            parent_release_id="rel-1",
            metrics_json='{"loss":0.1}',
            evaluation_json='{"pass":true}',
            sample_ids=["evt-sample"],
            pending=False,
        ),
        ReleaseCommitted(
            event_id="evt-committed",
            **_ENV,
            release_id="rel-2",
            proposal_id="prop-1",
            content_id="sha256:c1",
            operation="rollback",
            parent_release_id="rel-1",
            target_release_id="rel-0",
            sample_ids=[],
            pending=True,
        ),
        ReleaseRejected(
            event_id="evt-release-rejected",
            **_ENV,
            proposal_id="prop-2",
            reason="stale-parent",
            head_release_id="rel-2",
        ),
        EngineLoaded(
            event_id="evt-engine-loaded",
            **_ENV,
            engine_id="engine-a",
            release_id="rel-2",
            weight_version="w-8",
            method="lora-hot-swap",
            load_ms=850.0,
        ),
        EngineLoadFailed(
            event_id="evt-engine-failed",
            **_ENV,
            engine_id="engine-b",
            release_id="rel-2",
            error="out of memory",
            attempt=3,
        ),
        RecordErased(
            event_id="evt-record-erased",
            **_ENV,
            record_id="evt-inference",
            requested_by="admin-1",
        ),
        TurnCompleted(
            event_id="evt-turn-completed",
            **_ENV,
            session_id="evt-inference",
            turn_index=0,
            receipt_id="evt-inference",
            next_receipt_id="evt-inference-2",
            release_id="rel-1",
            matched_by="transcript",
            next_state_role="user",
        ),
        SessionExpired(
            event_id="evt-session-expired",
            **_ENV,
            session_id="evt-inference",
            last_receipt_id="evt-inference-2",
            turns=2,
            reason="idle",
            session_tag="agent-7",
        ),
        TurnJudged(
            event_id="evt-turn-judged",
            **_ENV,
            turn_id="evt-turn-completed",
            session_id="evt-inference",
            turn_index=0,
            receipt_id="evt-inference",
            next_receipt_id="evt-inference-2",
            release_id="rel-1",
            judge_model="judge-1",
            score=-1,
            votes=[-1, -1, 0],
            invalid_votes=1,
            hints=["Check the units before answering."],
            next_state_role="user",
        ),
        RolloutStarted(
            event_id="evt-rollout-started",
            **_ENV,
            rollout_id="rollout-1",
            candidate_release_id="rel-3",
            head_release_id="rel-2",
            mode="canary",
            share=0.125,
            min_exchanges=200,
            max_duration_s=86400.0,
            alpha=0.05,
            requested_by="admin-1",
        ),
        RolloutDecided(
            event_id="evt-rollout-decided",
            **_ENV,
            rollout_id="rollout-1",
            outcome="rolled_back",
            reason="max_duration",
            figures_json='{"p_better":0.5}',
        ),
    ]
    by_type = {event.type_name(): event for event in events}
    assert set(by_type) == set(EVENT_TYPES), "golden_events() must cover every event type"
    return by_type


def golden_path(type_name: str) -> Path:
    return GOLDEN_DIR / f"{type_name}.bin"
