"""Computed feedback: a judged turn becomes a report on its receipt, exactly once.

Input ``reef.judgements``; output ``reef.reports``. A report is what every weight recipe
trains from, so a judgement the join can take like any other report gives judged turns
the join's guarantees unchanged: one fate per report (``SampleJoined`` or
``ReportRejected``), staleness, erasure (a report quoting an erased receipt is rejected)
and duplicates. Rules, per ``TurnJudged``:

1. a turn already decided here (its first judgement was applied) is a no-op: a second
   judgement of the same turn (a judge that crashed after appending, two judges racing)
   and a redelivery produce nothing;
2. a failed judgement and a decision of 0 produce no report (the turn is remembered,
   so a later judgement of it is ignored too: the first one is the turn's judgement);
3. a decision of +1 or -1 becomes a ``ReportSubmitted`` whose id derives from the turn,
   ``references=[receipt]``, ``score`` the decision, ``feedback`` the hints (a list,
   null when there are none) and ``metadata`` naming the source (``"judge"``), the turn,
   its session, the judge model and the votes. Its content hash is the API's
   (:func:`report_content`), so a resend of the same content reads as a duplicate.

The hints quote the conversation, so they are stored as the judgement stores them:
sealed under the data keys of the turn's records (:mod:`reef.crypto.hints`), copied here
verbatim as ``{"sealed_hints": ..., "receipts": [receipt, next receipt]}``, so erasing a
record shreds them in the report and its sample too; only a judgement written in clear
(no key ring, or from before hints were sealed) gives a list in clear. No key and no body
is read here. State: ``turn/<scenario>/<turn_id>`` (the turn's outcome). No clock, no
I/O: replay reproduces every report.
"""

from __future__ import annotations

import json
from typing import Any

from reef.core import topics
from reef.core.events import Event, ReportSubmitted, TurnJudged
from reef.core.ids import content_hash, derived_id
from reef.core.sealed import hint_records, sealed_hints_copy
from reef.core.state import KeyValueState

PRODUCER = "reef-feedback"
#: ``metadata.source`` of a report computed from a judgement
SOURCE = "judge"
#: the reporter samples of computed reports are attributed to
REPORTER = "reef-judge"


def report_content(
    score: float, feedback: Any, references: list[str], metadata: dict[str, Any]
) -> dict[str, Any]:
    """What a report's content hash is taken over (the API hashes the same mapping)."""
    return {"score": score, "feedback": feedback, "references": references, "metadata": metadata}


def report_id(scenario: str, turn_id: str) -> str:
    """The id of the report computed from a turn's judgement (one per turn)."""
    return derived_id("judged-report", scenario, turn_id)


class FeedbackProcessor:
    name = "feedback"
    inputs = (topics.JUDGEMENTS,)
    output = topics.REPORTS

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        if not isinstance(event, TurnJudged):
            return []
        key = f"turn/{event.scenario}/{event.turn_id}"
        if state.get(key) is not None:
            return []
        if event.failed or event.score not in (1, -1):
            state.set(key, "failed" if event.failed else "neutral")
            return []
        state.set(key, "reported")
        return [computed_report(event)]


def computed_report(judged: TurnJudged) -> ReportSubmitted:
    """The report a ±1 judgement stands for (pure: the same judgement, the same report)."""
    score = float(judged.score)
    feedback = hints_feedback(judged)
    references = [judged.receipt_id]
    metadata: dict[str, Any] = {
        "source": SOURCE,
        "turn_id": judged.turn_id,
        "session_id": judged.session_id,
        "turn_index": judged.turn_index,
        "judge_model": judged.judge_model,
        "votes": list(judged.votes),
    }
    return ReportSubmitted(
        event_id=report_id(judged.scenario, judged.turn_id),
        scenario=judged.scenario,
        occurred_at=judged.occurred_at,
        producer=PRODUCER,
        score=score,
        feedback_json=json.dumps(feedback),
        references=references,
        metadata_json=json.dumps(metadata),
        content_hash=content_hash(report_content(score, feedback, references, metadata)),
        reporter=REPORTER,
    )


def hints_feedback(judged: TurnJudged) -> Any:
    """A computed report's feedback: the sealed hints as they are, else the clear ones."""
    if judged.hints_sealed is not None:
        return sealed_hints_copy(judged.hints_sealed, hint_records(judged))
    return list(judged.hints) or None
