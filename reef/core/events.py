"""Event types: immutable past-tense facts, one envelope, one Avro schema each.

The dataclasses mirror ``schemas/<Name>.avsc`` field for field (a test pins that).
Free-form JSON payloads (request bodies, feedback, metadata) travel as JSON text so
their shape can evolve without schema changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime


def utc_now() -> datetime:
    """The current time, truncated to the millisecond precision of the schemas."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """The envelope every event carries."""

    event_id: str
    scenario: str
    occurred_at: datetime
    producer: str

    @classmethod
    def type_name(cls) -> str:
        return cls.__name__


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioCreated(Event):
    recipe: str
    initial_release_id: str
    seed_content_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceRecorded(Event):
    dialect: str
    route: str
    release_id: str
    stream: bool
    status: int
    complete: bool
    latency_ms: float
    upstream_latency_ms: float
    served_release_id: str | None = None
    weight_version: str | None = None
    model: str | None = None
    error: str | None = None
    request_json: str | None = None
    request_ref: str | None = None
    response_json: str | None = None
    response_ref: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    #: bodies sealed under this record's data key (reef.crypto); readers open them
    sealed: bool = False
    request_sealed: bytes | None = None
    response_sealed: bytes | None = None
    #: what session matching reads instead of the sealed bodies (reef.core.fingerprints)
    message_fingerprints: list[str] | None = None
    answer_fingerprint: str | None = None
    has_tools: bool | None = None
    #: a shadow copy's served exchange (its receipt): never returned, never trained on
    shadow_of: str | None = None
    #: prompt-cache tokens as the provider reported them, and the cost priced at record
    #: time (reef.core.cost normalises the dialects' counts)
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordErased(Event):
    """A recorded exchange's data key was destroyed: its content is gone everywhere."""

    record_id: str
    requested_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportSubmitted(Event):
    #: None: the report gives feedback (text, a correction) and no score
    score: float | None = None
    feedback_json: str
    references: list[str]
    metadata_json: str
    content_hash: str
    reporter: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleJoined(Event):
    report_id: str
    references: list[str]
    trajectory_json: str
    score: float | None = None
    feedback_json: str
    metadata_json: str
    release_ids: list[str]
    reporter: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportRejected(Event):
    report_id: str
    reason: str
    detail: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnCompleted(Event):
    """An agent turn met its next state (reef.core.sessions): a judge can score it."""

    session_id: str
    turn_index: int
    receipt_id: str
    next_receipt_id: str
    release_id: str
    matched_by: str
    session_tag: str | None = None
    next_state_role: str | None = None
    #: a subagent's session: the session and the turn (its receipt) that spawned it
    parent_session_id: str | None = None
    parent_receipt_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionExpired(Event):
    """A session ended without a next state for its last turn: that turn never trains."""

    session_id: str
    last_receipt_id: str
    turns: int
    reason: str
    session_tag: str | None = None
    parent_session_id: str | None = None
    parent_receipt_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseProposed(Event):
    proposal_id: str
    content_id: str
    operation: str
    parent_release_id: str | None = None
    target_release_id: str | None = None
    metrics_json: str = "{}"
    evaluation_json: str = "{}"
    sample_ids: list[str] = field(default_factory=list)
    pending: bool = False
    rollout_json: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseCommitted(Event):
    release_id: str
    proposal_id: str
    content_id: str
    operation: str
    parent_release_id: str | None = None
    target_release_id: str | None = None
    metrics_json: str = "{}"
    evaluation_json: str = "{}"
    sample_ids: list[str] = field(default_factory=list)
    pending: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRejected(Event):
    proposal_id: str
    reason: str
    head_release_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutStarted(Event):
    """A held release began serving beside the head under a policy (reef.core.rollouts)."""

    rollout_id: str
    candidate_release_id: str
    head_release_id: str
    mode: str
    share: float
    min_exchanges: int
    max_duration_s: float
    alpha: float = 0.05
    requested_by: str | None = None
    latency_slo_ms: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutDecided(Event):
    """A rollout ended: its candidate promoted or rolled back (reef.core.rollouts)."""

    rollout_id: str
    outcome: str
    reason: str
    figures_json: str = "{}"
    requested_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLoaded(Event):
    engine_id: str
    release_id: str
    weight_version: str
    method: str
    load_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLoadFailed(Event):
    engine_id: str
    release_id: str
    error: str
    attempt: int


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        ScenarioCreated,
        InferenceRecorded,
        RecordErased,
        ReportSubmitted,
        SampleJoined,
        ReportRejected,
        TurnCompleted,
        SessionExpired,
        ReleaseProposed,
        ReleaseCommitted,
        ReleaseRejected,
        RolloutStarted,
        RolloutDecided,
        EngineLoaded,
        EngineLoadFailed,
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnJudged(Event):
    """A completed turn was judged (reef.services.judge); its id derives from the turn's,
    so a turn re-judged after a crash is the same fact and readers keep one."""

    turn_id: str
    session_id: str
    turn_index: int
    receipt_id: str
    next_receipt_id: str
    release_id: str
    judge_model: str
    score: int
    votes: list[int] = field(default_factory=list)
    invalid_votes: int = 0
    hints: list[str] = field(default_factory=list)
    next_state_role: str | None = None
    failed_reason: str | None = None
    #: the hints sealed under the judged and next records' data keys (reef.crypto.hints);
    #: ``hints`` is then empty, and readers open them
    hints_sealed: bytes | None = None

    @property
    def failed(self) -> bool:
        return self.failed_reason is not None


EVENT_TYPES[TurnJudged.__name__] = TurnJudged
