"""Turns and judgements made visible: the API projection's fold of ``reef.turns`` and
``reef.judgements`` (status and metrics read it), the audit trail of one receipt, and
``reef status``'s rendering of the figures."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from reef.cli.status import render
from reef.core.events import Event, SessionExpired, TurnCompleted, TurnJudged
from reef.core.ids import content_hash
from reef.services import audit
from reef.services.projection import ApiState

AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def completed(scenario: str, index: int, receipt: str, following: str) -> TurnCompleted:
    return TurnCompleted(
        event_id=f"turn-{receipt}",
        scenario=scenario,
        occurred_at=AT,
        producer="test",
        session_id="s1",
        turn_index=index,
        receipt_id=receipt,
        next_receipt_id=following,
        release_id="rel",
        matched_by="tag",
        next_state_role="user",
    )


def judged(turn: TurnCompleted, score: int, failed: str | None = None, **extra: Any) -> TurnJudged:
    return TurnJudged(
        event_id=f"judged-{turn.event_id}",
        scenario=turn.scenario,
        occurred_at=AT,
        producer="test",
        turn_id=turn.event_id,
        session_id=turn.session_id,
        turn_index=turn.turn_index,
        receipt_id=turn.receipt_id,
        next_receipt_id=turn.next_receipt_id,
        release_id=turn.release_id,
        judge_model="j",
        score=score,
        votes=[score] * 3 if failed is None else [],
        invalid_votes=0 if failed is None else 3,
        failed_reason=failed,
        **extra,
    )


def expired(scenario: str, last: str, turns: int) -> SessionExpired:
    return SessionExpired(
        event_id=f"expired-{last}",
        scenario=scenario,
        occurred_at=AT,
        producer="test",
        session_id="s1",
        last_receipt_id=last,
        turns=turns,
        reason="ttl",
    )


T0, T1, T2 = (
    completed("a", 0, "r0", "r1"),
    completed("a", 1, "r1", "r2"),
    completed("a", 2, "r2", "r3"),
)
OTHER = completed("b", 0, "q0", "q1")
HISTORY: list[Event] = [
    T0,
    T1,
    T0,  # a redelivered turn is one fact
    T2,
    OTHER,
    expired("a", "r3", 4),
    judged(T0, 1),
    judged(T0, -1),  # a raced judgement of the same turn: the first counts
    judged(T1, -1),
    judged(T2, 0, failed="no vote: HTTP 500"),
    judged(OTHER, 0),
]


def fold(events: list[Event]) -> ApiState:
    state = ApiState()
    for event in events:
        state.apply(event)
    return state


def test_the_projection_counts_each_turn_expiry_and_first_judgement_once() -> None:
    state = fold(HISTORY)
    assert state.turns["a"].as_json() == {
        "turns_completed": 3,
        "sessions_expired": 1,
        "turns_judged": {"+1": 1, "-1": 1, "0": 0},
        "judgements_failed": 1,
    }
    assert state.turns["b"].as_json() == {
        "turns_completed": 1,
        "sessions_expired": 0,
        "turns_judged": {"+1": 0, "-1": 0, "0": 1},
        "judgements_failed": 0,
    }


def test_the_turn_figures_are_in_the_digest_and_independent_of_topic_interleaving() -> None:
    turns = [e for e in HISTORY if not isinstance(e, TurnJudged)]
    judgements = [e for e in HISTORY if isinstance(e, TurnJudged)]
    # a replay folds topic by topic; a live follower interleaves them
    assert fold(judgements + turns).digest() == fold(HISTORY).digest()
    assert fold(HISTORY).digest() != fold(turns).digest()
    # a deployment without sessions keeps the digest it had before turns were projected
    assert ApiState().digest() == content_hash({"scenarios": [], "reports": [], "fates": []})


def test_the_trail_of_a_judged_turn_names_its_completion_and_first_judgement() -> None:
    found = audit.trail("r1", HISTORY)
    assert found.turn == ("s1", 1)
    assert found.completes == T0 and found.completed == T1
    assert found.judgement is not None and found.judgement.score == -1
    assert found.expired is None
    first = audit.trail("r0", HISTORY)
    assert first.judgement is not None and first.judgement.score == 1  # not the raced -1
    assert first.completes is None and first.turn == ("s1", 0)


def test_the_trail_of_a_sessions_last_turn_shows_its_expiry_and_no_judgement() -> None:
    found = audit.trail("r3", HISTORY)
    assert found.turn == ("s1", 3)
    assert found.completed is None and found.judgement is None
    assert found.expired is not None and found.expired.reason == "ttl"
    assert audit.trail("unrelated", HISTORY).turn is None


def test_reef_status_renders_turns_and_the_in_process_judge() -> None:
    state = fold(HISTORY)
    body: dict[str, Any] = {
        "producer": "p",
        "log": "embedded",
        "samples_pending": 0,
        "processors": {},
        "judge": {"group": "judge", "in_flight": 2, "error": "HTTPError: boom", "judged": 5},
        "scenarios": {
            name: {
                "recipe": "sft",
                "head_release_id": "rel",
                "releases": 1,
                "engines": {},
                "turns": state.turns[name].as_json(),
            }
            for name in ("a", "b")
        },
    }
    console = Console(record=True, width=160)
    render(body, console)
    text = console.export_text()
    assert "judged +1/-1/0" in text
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()]
    assert ["a", "3", "1", "1/1/0", "1"] in rows and ["b", "1", "0", "0/0/1", "0"] in rows
    assert "2 in flight, 5 judged, 0 failed; last error: HTTPError: boom" in text
