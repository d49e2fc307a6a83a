"""Computed feedback, pure: a judged turn becomes one report, the first judgement wins."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from reef.api.reports import ReportInput
from reef.catalog import processors
from reef.core import topics
from reef.core.events import ReportSubmitted, SampleJoined, TurnJudged
from reef.core.feedback import SOURCE, FeedbackProcessor, report_id
from reef.core.ids import content_hash, derived_id
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.settings import Settings
from reef_dev.events import inference, receipt
from streams.host import StreamsHost, changelog_topics

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def judged(
    n: int,
    score: int = 1,
    *,
    scenario: str = "alpha",
    hints: tuple[str, ...] = (),
    failed: str | None = None,
    judge_run: int = 0,
) -> TurnJudged:
    turn = derived_id("turn-completed", scenario, str(n))
    return TurnJudged(
        event_id=derived_id("turn-judged", turn),
        scenario=scenario,
        occurred_at=T0 + timedelta(seconds=n + judge_run),
        producer=f"judge-{judge_run}",
        turn_id=turn,
        session_id="s1",
        turn_index=n,
        receipt_id=receipt(scenario, n),
        next_receipt_id=receipt(scenario, n + 1),
        release_id="rel-a",
        judge_model="prm",
        score=score,
        votes=[score, score],
        invalid_votes=1,
        hints=list(hints),
        failed_reason=failed,
    )


def test_a_positive_or_negative_judgement_becomes_a_report_on_the_judged_receipt() -> None:
    state = DictState()
    (report,) = FeedbackProcessor().step(state, judged(1, -1, hints=("Say only the word.",)))
    assert isinstance(report, ReportSubmitted)
    assert report.event_id == report_id("alpha", judged(1).turn_id)
    assert report.references == [receipt("alpha", 1)]
    assert report.score == -1.0
    assert json.loads(report.feedback_json) == ["Say only the word."]
    metadata = json.loads(report.metadata_json)
    assert metadata == {
        "source": SOURCE,
        "turn_id": judged(1).turn_id,
        "session_id": "s1",
        "turn_index": 1,
        "judge_model": "prm",
        "votes": [-1, -1],
    }
    assert report.reporter == "reef-judge"


def test_the_content_hash_is_the_one_the_api_computes_for_the_same_report() -> None:
    (report,) = FeedbackProcessor().step(DictState(), judged(2, 1))
    assert isinstance(report, ReportSubmitted)
    as_api = ReportInput(
        report_id=report.event_id,
        client_chosen=True,
        score=report.score,
        feedback=json.loads(report.feedback_json),
        references=report.references,
        metadata=json.loads(report.metadata_json),
    )
    assert report.content_hash == content_hash(as_api.content())
    assert json.loads(report.feedback_json) is None  # no hints: null feedback


def test_neutral_and_failed_judgements_produce_nothing_and_decide_the_turn() -> None:
    processor, state = FeedbackProcessor(), DictState()
    assert processor.step(state, judged(3, 0)) == []
    assert processor.step(state, judged(4, failed="no vote: timeout")) == []
    # a later judgement of the same turns (a re-judge after a crash) is ignored
    assert processor.step(state, judged(3, 1, judge_run=1)) == []
    assert processor.step(state, judged(4, -1, judge_run=1)) == []


def test_the_first_judgement_of_a_turn_wins_and_a_redelivery_changes_nothing() -> None:
    processor, state = FeedbackProcessor(), DictState()
    first = processor.step(state, judged(5, 1))
    snapshot = dict(state.data)
    assert processor.step(state, judged(5, 1)) == []
    assert processor.step(state, judged(5, -1, judge_run=1)) == []
    assert state.data == snapshot
    again = FeedbackProcessor().step(DictState(), judged(5, 1))
    assert again == first  # deterministic: same judgement, same report


def test_turns_of_other_scenarios_are_decided_apart() -> None:
    processor, state = FeedbackProcessor(), DictState()
    a = processor.step(state, judged(6, 1, scenario="alpha"))
    b = processor.step(state, judged(6, 1, scenario="beta"))
    assert len(a) == len(b) == 1 and a[0].event_id != b[0].event_id


def test_the_join_turns_the_computed_report_into_a_sample_with_its_metadata() -> None:
    join, state = JoinProcessor(), DictState()
    join.step(state, inference("alpha", receipt("alpha", 7), T0))
    (report,) = FeedbackProcessor().step(DictState(), judged(7, 1, hints=("A longer hint.",)))
    (sample,) = join.step(state, report)
    assert isinstance(sample, SampleJoined)
    assert sample.references == [receipt("alpha", 7)] and sample.score == 1.0
    assert json.loads(sample.metadata_json)["source"] == SOURCE
    assert join.step(state, report) == []  # a redelivered report: the join's duplicate


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.sampled_from([-1, 0, 1]),
            st.booleans(),
            st.sampled_from(["alpha", "beta"]),
        ),
        max_size=30,
    )
)
def test_each_turn_yields_at_most_one_report_from_its_first_judgement(
    plan: list[tuple[int, int, bool, str]],
) -> None:
    """Any sequence of judgements (re-judgements with other outcomes, redeliveries):
    one report per turn at most, from that turn's first judgement; replaying the same
    inputs into a fresh state gives the same reports."""
    events = [
        judged(n, score, scenario=scenario, failed="boom" if failed else None, judge_run=i)
        for i, (n, score, failed, scenario) in enumerate(plan)
    ]
    events += events[: len(events) // 2]  # redeliveries
    processor, state = FeedbackProcessor(), DictState()
    reports = [r for e in events for r in processor.step(state, e)]
    assert all(isinstance(r, ReportSubmitted) for r in reports)
    firsts: dict[str, TurnJudged] = {}
    for event in events:
        firsts.setdefault(f"{event.scenario}/{event.turn_id}", event)
    expected = [e.event_id for e in firsts.values() if not e.failed and e.score in (1, -1)]
    assert len(reports) == len({r.event_id for r in reports}) == len(expected)
    for r in reports:
        assert isinstance(r, ReportSubmitted)
        first = firsts[f"{r.scenario}/{json.loads(r.metadata_json)['turn_id']}"]
        assert r.score == first.score
    fresh, fresh_state = FeedbackProcessor(), DictState()
    replayed = [r for e in events for r in fresh.step(fresh_state, e)]
    assert replayed == reports


def test_a_changed_judgement_id_for_the_same_turn_is_still_the_same_turn() -> None:
    processor, state = FeedbackProcessor(), DictState()
    assert processor.step(state, judged(8, 1))
    other = replace(judged(8, -1), event_id="another-judgement-id")
    assert processor.step(state, other) == []


def test_both_hosts_run_it_only_with_sessions_tracked_and_the_judge_on(tmp_path: Path) -> None:
    judged_settings = Settings.of(track_sessions=True, judge_turns=True)
    assert "feedback" in [p.name for p in processors(judged_settings)]
    for off in (Settings.of(track_sessions=True), Settings.of(judge_turns=True), Settings()):
        assert "feedback" not in [p.name for p in processors(off)]
    host = StreamsHost(judged_settings, tmp_path)  # the Kafka host: subscribed, not started
    assert "feedback" in host.names()
    assert [h.processor.name for h in host.readers[topics.JUDGEMENTS]] == ["feedback"]
    assert any(t.endswith("-feedback-state-changelog") for t in changelog_topics(judged_settings))
