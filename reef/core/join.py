"""The join: reports meet the exchanges they quote and become training samples.

Inputs ``reef.inference`` and ``reef.reports`` (co-partitioned by scenario); output
``reef.samples``. Each report gets exactly one fate per distinct content: SampleJoined,
or ReportRejected with a reason. Rules, in the order applied:

1. a report id seen again with the same content hash is a no-op (``duplicate``);
   with different content it is ``conflict`` (and a still-parked original with it);
2. every reference must carry this scenario's tag (else ``foreign_reference``),
   be distinct, and not be consumed already (else ``already_consumed``);
3. a reference not recorded yet parks the report until it arrives, or until the
   event time of this partition passes the report's deadline (``unknown_reference``);
4. with session merging on, each reference brings the unconsumed earlier turns of its
   conversation; the sample lists receipts in conversation (event-time) order. A turn
   continues an earlier exchange when its request starts with that exchange's messages
   and answer, compared by the fingerprints the API records beside sealed bodies
   (:mod:`reef.core.fingerprints`), or by the text of a record that has none and is
   neither sealed nor claim-checked;
5. a shadow copy (:mod:`reef.core.shadow`) joins like any exchange but belongs to no
   conversation, and its trajectory step keeps ``shadow_of``: it may score, never train.

Event time, not wall time, drives expiry so that replay reproduces every decision.
Bodies that were claim-checked stay references (``{"claim": "sha256:<oid>"}``) in the
state and in samples, so no state or sample record grows with a body; trainers resolve
them with :class:`reef.artifacts.ClaimCheck`.

Sealed bodies (:mod:`reef.crypto`) are carried as the sealed blobs themselves
(``{"sealed": ...}`` / ``{"sealed_claim": ...}``): the join never holds a key, so its
decisions do not depend on which keys still exist and replay stays exact after an
erasure. A RecordErased drops the record from the state; a later report quoting it is
rejected as ``erased``. Session merging reads the fingerprints, never the bodies, so
it does not depend on keys either.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from reef.core import conversation, topics
from reef.core.events import (
    Event,
    InferenceRecorded,
    RecordErased,
    ReportRejected,
    ReportSubmitted,
    SampleJoined,
)
from reef.core.ids import derived_id, scenario_tag
from reef.core.sealed import sealed_copy
from reef.core.shadow import SHADOW_KEY
from reef.core.state import KeyValueState

PRODUCER = "reef-join"


@dataclass(frozen=True, slots=True)
class JoinSettings:
    park_timeout: timedelta = timedelta(minutes=5)
    max_parked: int = 1000
    merge_sessions: bool = False


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _step(receipt: str, record: dict[str, Any]) -> dict[str, Any]:
    """One exchange of a sample's trajectory; a shadow copy keeps its mark, so the
    never-trained rule reads it from the sample alone (:func:`reef.core.shadow.trains`)."""
    step: dict[str, Any] = {"receipt": receipt}
    step.update((k, record[k]) for k in ("release_id", "route", "request", "response"))
    if record.get(SHADOW_KEY) is not None:
        step[SHADOW_KEY] = record[SHADOW_KEY]
    return step


class JoinProcessor:
    name = "join"
    inputs = (topics.INFERENCE, topics.REPORTS)
    output = topics.SAMPLES

    def __init__(self, settings: JoinSettings | None = None) -> None:
        self.settings = settings or JoinSettings()

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        if isinstance(event, InferenceRecorded):
            outputs = self._expire(state, event.scenario, event.occurred_at)
            return outputs + self._recorded(state, event)
        if isinstance(event, ReportSubmitted):
            outputs = self._expire(state, event.scenario, event.occurred_at)
            return outputs + self._reported(state, event)
        if isinstance(event, RecordErased):
            outputs = self._expire(state, event.scenario, event.occurred_at)
            self._erased(state, event)
            return outputs
        return []

    def reads(self, event: Event) -> list[str]:
        """The state keys a step on ``event`` reads (:class:`reef.core.state.ReadHinting`):
        the ones every such step looks up, not the rarer conflict or session keys."""
        keys = [f"parked/{event.scenario}"]
        if isinstance(event, InferenceRecorded):
            keys += [f"rec/{event.event_id}", f"erased/{event.event_id}"]
        elif isinstance(event, ReportSubmitted):
            keys.append(f"report/{event.scenario}/{event.event_id}")
            for r in event.references:
                keys += [f"erased/{r}", f"consumed/{r}", f"rec/{r}"]
        return keys

    def _erased(self, state: KeyValueState, event: RecordErased) -> None:
        """Forget the record (its sealed bodies) and remember that it was erased."""
        if not event.record_id.startswith(scenario_tag(event.scenario)):
            return  # not this scenario's record: nothing to do here
        state.delete(f"rec/{event.record_id}")
        state.set(f"erased/{event.record_id}", True)

    # -- exchanges ---------------------------------------------------------------------

    def _recorded(self, state: KeyValueState, event: InferenceRecorded) -> list[Event]:
        key = f"rec/{event.event_id}"
        if not event.complete or state.get(key) is not None:
            return []
        if state.get(f"erased/{event.event_id}") is not None:
            return []  # a redelivered record that was erased meanwhile
        if event.sealed:
            request = sealed_copy(event.request_sealed, event.request_ref)
            response = sealed_copy(event.response_sealed, event.response_ref)
        else:
            request = _body(event.request_json, event.request_ref)
            response = _body(event.response_json, event.response_ref)
        record: dict[str, Any] = {
            "scenario": event.scenario,
            # the release whose weights answered (when the engine said so), else the head
            # the request was frozen on: staleness is measured from what really served
            "release_id": event.served_release_id or event.release_id,
            "route": event.route,
            "at": _ms(event.occurred_at),
            "request": request,
            "response": response,
            "parent": None,
        }
        if event.shadow_of is not None:  # a shadow copy: in no conversation (reef.core.shadow)
            record[SHADOW_KEY] = event.shadow_of
        elif self.settings.merge_sessions:
            record["parent"] = self._link_session(state, event, request, response)
        state.set(key, record)
        return self._retry_parked(state, event.scenario)

    def _link_session(
        self, state: KeyValueState, event: InferenceRecorded, request: Any, response: Any
    ) -> str | None:
        """The receipt this exchange continues (None: none), filing this exchange's own
        conversation (its messages and answer) for the turn that may continue it."""
        turns = conversation.turns_of(event, request, response)
        if turns is None:
            return None  # sealed or claim-checked without fingerprints: nothing to compare
        messages, answer = turns
        prefix = f"conv/{event.scenario}/"
        parent = None
        for end in range(len(messages) - 1, 0, -1):
            found = state.get(prefix + conversation.key_of(messages[:end]))
            if found is not None:
                parent = str(found)
                break
        if answer is not None:
            state.set(prefix + conversation.key_of([*messages, answer]), event.event_id)
        return parent

    # -- reports -----------------------------------------------------------------------

    def _reported(self, state: KeyValueState, event: ReportSubmitted) -> list[Event]:
        seen = state.get(f"report/{event.scenario}/{event.event_id}")
        if seen is not None:
            if seen["hash"] == event.content_hash:
                return []
            conflict_key = f"conflict/{event.scenario}/{event.event_id}/{event.content_hash}"
            if state.get(conflict_key) is not None:
                return []  # this other content was rejected already (a resend or redelivery)
            state.set(conflict_key, "rejected")
            return self._conflict(state, event, seen)
        state.set(
            f"report/{event.scenario}/{event.event_id}",
            {"hash": event.content_hash, "fate": "pending"},
        )
        return self._decide(state, _parked_from(event), event.occurred_at)

    def _conflict(
        self, state: KeyValueState, event: ReportSubmitted, seen: dict[str, Any]
    ) -> list[Event]:
        outputs: list[Event] = [
            _rejected(
                event.scenario,
                event.event_id,
                event.content_hash,
                "conflict",
                "another report has this id",
                event.occurred_at,
            )
        ]
        parked = state.get(f"parked/{event.scenario}") or []
        remaining = [p for p in parked if p["id"] != event.event_id]
        if len(remaining) != len(parked):  # the original was still waiting: it conflicts too
            _store_parked(state, f"parked/{event.scenario}", remaining)
            state.set(
                f"report/{event.scenario}/{event.event_id}",
                {"hash": seen["hash"], "fate": "rejected"},
            )
            outputs.insert(
                0,
                _rejected(
                    event.scenario,
                    event.event_id,
                    seen["hash"],
                    "conflict",
                    "another report has this id",
                    event.occurred_at,
                ),
            )
        return outputs

    def _decide(self, state: KeyValueState, report: dict[str, Any], now: datetime) -> list[Event]:
        scenario = report["scenario"]
        refs = report["references"]
        reason = self._invalid(state, scenario, refs)
        if reason is not None:
            return [self._reject(state, report, reason, now)]
        records = {r: state.get(f"rec/{r}") for r in refs}  # refs are distinct (_invalid)
        if None in records.values():
            return self._park(state, report, now)
        if any(record["scenario"] != scenario for record in records.values()):
            # the tag is 32 bits of a hash: a name crafted to collide must not cross over
            detail = "a referenced record belongs to another scenario"
            return [self._reject(state, report, "foreign_reference", now, detail)]
        return [self._join(state, report, now, records)]

    def _invalid(self, state: KeyValueState, scenario: str, refs: list[str]) -> str | None:
        if not refs:
            return "no_references"
        tag = scenario_tag(scenario)
        for r in refs:
            if not r.startswith(tag):
                return "foreign_reference"
        if len(set(refs)) != len(refs):
            return "duplicate_reference"
        for r in refs:
            if state.get(f"erased/{r}") is not None:
                return "erased"
        for r in refs:
            if state.get(f"consumed/{r}") is not None:
                return "already_consumed"
        return None

    def _park(self, state: KeyValueState, report: dict[str, Any], now: datetime) -> list[Event]:
        key = f"parked/{report['scenario']}"
        parked = list(state.get(key) or [])
        if len(parked) >= self.settings.max_parked:
            return [
                self._reject(state, report, "unknown_reference", now, "too many reports waiting")
            ]
        report["deadline"] = _ms(now + self.settings.park_timeout)
        parked.append(report)
        state.set(key, parked)
        return []

    def _retry_parked(self, state: KeyValueState, scenario: str) -> list[Event]:
        key = f"parked/{scenario}"
        parked = list(state.get(key) or [])
        ready: list[dict[str, Any]] = []
        waiting: list[dict[str, Any]] = []
        for p in parked:
            arrived = all(state.get(f"rec/{r}") is not None for r in p["references"])
            (ready if arrived else waiting).append(p)
        if not ready:
            return []
        _store_parked(state, key, waiting)
        outputs: list[Event] = []
        for report in ready:
            outputs.extend(self._decide(state, report, _at(report["at"])))
        return outputs

    def _expire(self, state: KeyValueState, scenario: str, now: datetime) -> list[Event]:
        key = f"parked/{scenario}"
        parked = state.get(key)
        if not parked:
            return []
        deadline = _ms(now)
        expired = [p for p in parked if p["deadline"] < deadline]
        if not expired:
            return []
        # by deadline, not by equality: a report equal to an expired one is expired too
        _store_parked(state, key, [p for p in parked if p["deadline"] >= deadline])
        return [
            self._reject(state, p, "unknown_reference", now, "referenced record never arrived")
            for p in expired
        ]

    def _reject(
        self,
        state: KeyValueState,
        report: dict[str, Any],
        reason: str,
        now: datetime,
        detail: str | None = None,
    ) -> Event:
        state.set(
            f"report/{report['scenario']}/{report['id']}",
            {"hash": report["hash"], "fate": "rejected"},
        )
        return _rejected(report["scenario"], report["id"], report["hash"], reason, detail, now)

    def _join(
        self,
        state: KeyValueState,
        report: dict[str, Any],
        now: datetime,
        referenced: dict[str, dict[str, Any]],
    ) -> Event:
        found = self._trajectory(state, referenced)
        receipts = list(found)
        if len(receipts) > 1:
            receipts.sort(key=_trajectory_order(found, report["references"]))
        for receipt in receipts:
            state.set(f"consumed/{receipt}", report["id"])
        state.set(
            f"report/{report['scenario']}/{report['id']}",
            {"hash": report["hash"], "fate": "accepted"},
        )
        records = [found[r] for r in receipts]
        releases = list(dict.fromkeys(rec["release_id"] for rec in records))
        trajectory = [_step(r, rec) for r, rec in zip(receipts, records, strict=True)]
        return SampleJoined(
            event_id=derived_id("sample", report["scenario"], report["id"], report["hash"]),
            scenario=report["scenario"],
            occurred_at=now,
            producer=PRODUCER,
            report_id=report["id"],
            references=receipts,
            trajectory_json=json.dumps(trajectory),
            score=report["score"],
            feedback_json=report["feedback"],
            metadata_json=report["metadata"],
            release_ids=releases,
            reporter=report.get("reporter"),
        )

    def _trajectory(
        self, state: KeyValueState, referenced: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """The referenced records plus (when merging) their unconsumed earlier turns, in
        the order found (the tie-break among earlier turns of equal time)."""
        chosen: dict[str, dict[str, Any]] = {}
        for ref, found in referenced.items():
            receipt: str | None = ref
            while receipt is not None and receipt not in chosen:
                record = found if receipt == ref else state.get(f"rec/{receipt}")
                if record is None or (receipt != ref and state.get(f"consumed/{receipt}")):
                    break
                chosen[receipt] = record
                receipt = record["parent"] if self.settings.merge_sessions else None
        return chosen


def _trajectory_order(
    chosen: dict[str, dict[str, Any]], refs: list[str]
) -> Callable[[str], tuple[int, int]]:
    """Conversation (event-time) order; among equal times the earlier turns first (in the
    order the walk found them: the sort is stable), then the references in report order."""
    order = {r: i for i, r in enumerate(refs)}
    return lambda r: (chosen[r]["at"], order.get(r, -1))


def _store_parked(state: KeyValueState, key: str, parked: list[dict[str, Any]]) -> None:
    """Empty lists are deleted, so the state is the same whatever the interleaving."""
    if parked:
        state.set(key, parked)
    else:
        state.delete(key)


def _parked_from(event: ReportSubmitted) -> dict[str, Any]:
    return {
        "id": event.event_id,
        "scenario": event.scenario,
        "hash": event.content_hash,
        "references": list(event.references),
        "score": event.score,
        "feedback": event.feedback_json,
        "metadata": event.metadata_json,
        "at": _ms(event.occurred_at),
        "reporter": event.reporter,
    }


def _rejected(
    scenario: str, report_id: str, content: str, reason: str, detail: str | None, now: datetime
) -> ReportRejected:
    return ReportRejected(
        event_id=derived_id("rejected", scenario, report_id, content),
        scenario=scenario,
        occurred_at=now,
        producer=PRODUCER,
        report_id=report_id,
        reason=reason,
        detail=detail,
    )


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _body(text: str | None, ref: str | None) -> Any:
    """The body as JSON, or ``{"claim": ref}`` when it lives in the artifact store."""
    if ref is not None:
        return {"claim": ref}
    return _loads(text)


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
