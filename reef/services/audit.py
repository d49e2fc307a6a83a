"""Audit: is the history what it claims to be? Pure checks over events and the store.

- every release's id recomputes from (scenario, parent, content, operation);
- every parent is an earlier release of the same scenario, and the serving (non-pending)
  releases form one line: each one's parent is the head before it;
- every release's content (manifest and each object) is in the artifact store and its
  bytes match their sha256;
- every sample's references are recorded exchanges of the same scenario (an erased
  exchange still counts: its lineage stays, only its content is gone).

:func:`trail` follows one receipt through the log: its reports, samples, releases and
engines, the rollout arm that served it, and, with sessions tracked, its turn (completed,
expired) and judgement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from reef.artifacts import ArtifactError
from reef.artifacts.content import ContentStore
from reef.core.events import (
    EngineLoaded,
    Event,
    InferenceRecorded,
    RecordErased,
    ReleaseCommitted,
    ReportSubmitted,
    SampleJoined,
    ScenarioCreated,
    SessionExpired,
    TurnCompleted,
    TurnJudged,
)
from reef.core.ids import EMPTY_CONTENT_ID, release_id
from reef.core.live_decision import Arm
from reef.core.rollouts import Rollout, RolloutBook


@dataclass(slots=True)
class AuditReport:
    problems: list[str] = field(default_factory=list)
    releases: int = 0
    samples: int = 0
    objects: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_chain(events: Iterable[Event], report: AuditReport) -> list[ReleaseCommitted]:
    """Hash and parent checks; returns the committed releases in log order."""
    heads: dict[str, str | None] = {}
    known: dict[str, set[str]] = {}
    commits: list[ReleaseCommitted] = []
    for event in events:
        if isinstance(event, ScenarioCreated):
            heads.setdefault(event.scenario, None)
        if not isinstance(event, ReleaseCommitted):
            continue
        report.releases += 1
        commits.append(event)
        scenario, rid = event.scenario, event.release_id
        seen = known.setdefault(scenario, set())
        if rid in seen:
            continue  # the same creation committed twice by racing replicas is harmless
        expected = release_id(scenario, event.parent_release_id, event.content_id, event.operation)
        if expected != rid:
            report.problems.append(
                f"{scenario}: release {rid} does not match its hash (expected {expected}): tampered"
            )
        parent = event.parent_release_id
        if parent is None and event.operation != "creation":
            report.problems.append(f"{scenario}: release {rid} has no parent")
        if parent is not None and parent not in seen:
            report.problems.append(f"{scenario}: release {rid} names unknown parent {parent}")
        if not event.pending and parent is not None and heads.get(scenario) not in (None, parent):
            report.problems.append(
                f"{scenario}: release {rid} forks the chain (parent {parent} was not the head)"
            )
        seen.add(rid)
        if not event.pending:
            heads[scenario] = rid
    return commits


def verify_content(
    commits: Iterable[ReleaseCommitted],
    content: ContentStore,
    report: AuditReport,
    *,
    deep: bool = True,
) -> None:
    """Every manifest and object is present (and, when deep, its bytes hash right)."""
    checked: set[str] = set()
    for commit in commits:
        if commit.content_id in checked or commit.content_id == EMPTY_CONTENT_ID:
            continue
        checked.add(commit.content_id)
        where = f"{commit.scenario}: release {commit.release_id}"
        try:
            manifest = content.load(commit.content_id)
        except ArtifactError as exc:
            report.problems.append(f"{where}: manifest {commit.content_id} unreadable: {exc}")
            continue
        for path, entry in manifest.items():
            report.objects += 1
            try:
                if deep:
                    content.store.get_bytes(entry.oid)
                elif not content.store.exists(entry.oid):
                    raise ArtifactError("missing")
            except ArtifactError as exc:
                report.problems.append(f"{where}: {path} ({entry.oid}): {exc}")


def verify_samples(events: Iterable[Event], report: AuditReport) -> None:
    recorded: dict[str, str] = {}
    samples: list[SampleJoined] = []
    for event in events:
        if isinstance(event, InferenceRecorded):
            recorded[event.event_id] = event.scenario
        elif isinstance(event, SampleJoined):
            samples.append(event)
    for sample in samples:
        report.samples += 1
        for ref in sample.references:
            if recorded.get(ref) != sample.scenario:
                report.problems.append(
                    f"{sample.scenario}: sample {sample.event_id} references {ref}, "
                    "which is not a recorded exchange of this scenario"
                )


#: the fields of an exchange that hold (or point to) its content
CONTENT_FIELDS = frozenset(
    {
        "request_json",
        "response_json",
        "request_ref",
        "response_ref",
        "request_sealed",
        "response_sealed",
    }
)


@dataclass(slots=True)
class Trail:
    """Everything the log says about one receipt."""

    record: InferenceRecorded | None = None
    #: the erasure of the record, when it was erased (its content is then gone)
    erased: RecordErased | None = None
    reports: list[ReportSubmitted] = field(default_factory=list)
    samples: list[SampleJoined] = field(default_factory=list)
    releases: list[ReleaseCommitted] = field(default_factory=list)
    engines: list[EngineLoaded] = field(default_factory=list)
    #: the exchange as an agent turn (sessions tracked): the turn it completed (its
    #: ``next_receipt_id`` is this receipt), its own completion as turn N, the expiry of
    #: its session with it as the last turn, and its judgement (the first per id)
    completes: TurnCompleted | None = None
    completed: TurnCompleted | None = None
    expired: SessionExpired | None = None
    judgement: TurnJudged | None = None
    #: the rollout that was live when the exchange was recorded, and the arm that served
    #: it (the release the engine reported, else the one routed)
    rollout: Rollout | None = None
    arm: Arm | None = None
    #: the copy a shadow rollout's candidate answered (reef.core.shadow), never returned
    shadow: InferenceRecorded | None = None

    @property
    def turn(self) -> tuple[str, int] | None:
        """(session id, turn index) of the exchange, when it is a turn of a session."""
        if self.completed is not None:
            return self.completed.session_id, self.completed.turn_index
        if self.completes is not None:
            return self.completes.session_id, self.completes.turn_index + 1
        if self.expired is not None:
            return self.expired.session_id, self.expired.turns - 1
        return None


def trail(receipt: str, events: Iterable[Event]) -> Trail:
    out = Trail()
    ordered = list(events)
    for event in ordered:
        if isinstance(event, InferenceRecorded) and event.event_id == receipt:
            out.record = event
        elif isinstance(event, InferenceRecorded) and event.shadow_of == receipt:
            out.shadow = out.shadow or event
        elif isinstance(event, TurnCompleted):
            if event.receipt_id == receipt:
                out.completed = out.completed or event
            if event.next_receipt_id == receipt:
                out.completes = out.completes or event
        elif isinstance(event, SessionExpired) and event.last_receipt_id == receipt:
            out.expired = out.expired or event
        elif isinstance(event, TurnJudged) and event.receipt_id == receipt:
            out.judgement = out.judgement or event  # the first per id, as readers keep
        elif isinstance(event, RecordErased) and event.record_id == receipt:
            out.erased = out.erased or event
        elif isinstance(event, ReportSubmitted) and receipt in event.references:
            out.reports.append(event)
        elif isinstance(event, SampleJoined) and receipt in event.references:
            out.samples.append(event)
    sample_ids = {s.event_id for s in out.samples}
    out.releases = [
        e for e in ordered if isinstance(e, ReleaseCommitted) and sample_ids & set(e.sample_ids)
    ]
    release_ids = {r.release_id for r in out.releases}
    out.engines = [
        e for e in ordered if isinstance(e, EngineLoaded) and e.release_id in release_ids
    ]
    if out.record is not None:
        out.rollout, out.arm = serving_arm(out.record, ordered)
    return out


def serving_arm(
    record: InferenceRecorded, events: Iterable[Event]
) -> tuple[Rollout | None, Arm | None]:
    """The rollout of the record's scenario that had started and not ended when the
    record was made, and the arm its serving release was in it (None: not an arm)."""
    book = RolloutBook()
    for event in events:
        if event.scenario == record.scenario:
            book.apply(event)
    view = book.scenario(record.scenario)
    served = record.served_release_id or record.release_id
    for rollout in [] if view is None else view.rollouts:
        ended = rollout.ended_at
        if rollout.started_at <= record.occurred_at and (
            ended is None or record.occurred_at <= ended
        ):
            if served == rollout.candidate_release_id:
                return rollout, "candidate"
            return rollout, "head" if served == rollout.head_release_id else None
    return None, None
