"""Reports of feedback alone (text, or an object such as a correction; no score): the
API's validation accepts them and refuses a report that says nothing, the log carries
them (encoded, decoded), the join turns them into samples without a score, and each
recipe that trains on scores gives such a sample the fate ``no_score`` while ``sft``
trains on its correction. In process: the app ``reef serve`` builds records an exchange
and such a report; the join replayed over its log joins it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recipes.base import Recipe
from recipes.registry import build_recipe
from recipes.samples import Sample, Turn, sample_from_event
from reef.api.reports import validate_report
from reef.codec import EventCodec
from reef.core.errors import RequestError
from reef.core.events import ReportSubmitted, SampleJoined
from reef.core.ids import content_hash
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.services.replay import ordered_events
from reef.settings import Settings
from reef.testing.scripted_upstream import make_app
from reef_dev.events import inference, receipt
from tests.support.in_process import reef_api, serving
from tests.support.join import at, fresh, only

S = "demo"
TASKS = {"tasks": [{"prompt": "Return exactly: cat", "answer": "cat"}]}

# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"feedback": "the answer ignored the question"},
        {"feedback": {"correction": "cat"}},
        {"score": None, "feedback": "too long"},
    ],
)
def test_feedback_without_a_score_is_a_report(body: dict[str, Any]) -> None:
    report = validate_report({**body, "references": ["r1"]})
    assert report.score is None
    assert report.feedback == body["feedback"]
    assert "score" not in report.content()  # nothing stands in for the missing score


@pytest.mark.parametrize("body", [{}, {"feedback": ""}, {"feedback": "  "}, {"feedback": {}}])
def test_a_report_with_neither_score_nor_feedback_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(RequestError) as raised:
        validate_report({**body, "references": ["r1"]})
    assert (raised.value.status, raised.value.code) == (400, "empty_report")


@pytest.mark.parametrize("score", [True, "1", float("nan"), float("inf"), 10**400])
def test_a_score_given_must_still_be_a_finite_number(score: object) -> None:
    with pytest.raises(RequestError) as raised:
        validate_report({"score": score, "feedback": "text", "references": ["r1"]})
    assert raised.value.code == "invalid_score"


def test_a_scored_reports_content_hash_is_unchanged() -> None:
    """A resend of a report written before scores were optional is still a duplicate."""
    body = {"score": 0.5, "feedback": "ok", "references": ["r1"], "metadata": {}}
    assert content_hash(validate_report(body).content()) == content_hash(
        {"score": 0.5, "feedback": "ok", "references": ["r1"], "metadata": {}}
    )


# -- the log and the join ------------------------------------------------------------------


def unscored(report_id: str, refs: list[str], seconds: float) -> ReportSubmitted:
    content = {"feedback": "wrong city", "references": refs, "metadata": {}}
    return ReportSubmitted(
        event_id=report_id,
        scenario=S,
        occurred_at=at(seconds),
        producer="test",
        feedback_json=json.dumps("wrong city"),
        references=refs,
        metadata_json="{}",
        content_hash=content_hash(content),
    )


def roundtrips(codec: EventCodec, event: ReportSubmitted | SampleJoined) -> bool:
    """Both writers (the compiled plan and fastavro) and both readers agree."""
    fast, reference = codec.encode(event)[0], codec.encode_reference(event)[0]
    return fast == reference and codec.decode(fast) == codec.decode_reference(fast) == event


def test_an_unscored_report_and_its_sample_survive_the_codec() -> None:
    codec = EventCodec()
    assert roundtrips(codec, unscored("r1", ["a"], 0))
    a = receipt(S, 1)
    join, state = fresh()
    join.step(state, inference(S, a, at(0)))
    sample = only(join.step(state, unscored("r1", [a], 1)))
    assert isinstance(sample, SampleJoined) and sample.score is None
    assert roundtrips(codec, sample)
    assert roundtrips(codec, dataclasses.replace(sample, score=0.25))


# -- recipes: the fate of a sample without a score ------------------------------------------


def sample(*, score: float | None, feedback: object) -> Sample:
    turn = Turn(
        "r1",
        "rel",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Say cat"}]},
        {"choices": [{"message": {"role": "assistant", "content": "dog"}}]},
    )
    return Sample("s1", S, "rep", score, feedback, {"prompt_id": "p"}, (turn,), ("rel",))


NEEDS_SCORE = [
    ("grpo", {"batching": {"group_by": "prompt_id", "group_size": 2}}),
    ("sao", {}),
    ("openclaw_rl", {}),
    ("harness_evolve", {"evaluation": TASKS}),
    ("gepa", {"evaluation": TASKS}),
]


@pytest.mark.parametrize(("name", "config"), NEEDS_SCORE)
def test_a_recipe_that_trains_on_scores_skips_an_unscored_sample_as_no_score(
    name: str, config: dict[str, Any]
) -> None:
    recipe: Recipe[Any] = build_recipe(name, config)
    assert recipe.needs_score
    assert recipe.admit(sample(score=None, feedback={"correction": "cat"}), 0) == "no_score"


def test_sft_trains_on_the_correction_of_an_unscored_report() -> None:
    recipe: Recipe[Any] = build_recipe("sft")
    assert not recipe.needs_score
    assert recipe.admit(sample(score=None, feedback={"correction": "cat"}), 0) is None
    # text alone carries no training signal for sft: that is its own reason, not no_score
    assert recipe.admit(sample(score=None, feedback="wrong"), 0) == "no_training_signal"


def test_a_score_window_cannot_admit_an_unscored_sample() -> None:
    recipe: Recipe[Any] = build_recipe("sft", {"eligibility": {"min_score": 0.5}})
    assert recipe.admit(sample(score=None, feedback={"correction": "cat"}), 0) == "no_score"


# -- through the app -------------------------------------------------------------------------


@pytest.fixture
async def upstream_url() -> AsyncIterator[str]:
    async with serving(make_app()) as url:
        yield f"{url}/v1"


async def test_the_api_records_an_unscored_report_and_the_join_joins_it(
    tmp_path: Path, upstream_url: str
) -> None:
    settings = Settings.of(state_dir=tmp_path / "state", upstream_url=upstream_url, insecure=True)
    headers = {"x-reef-scenario": S}
    async with reef_api(settings) as (client, ctx):
        answer = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "Say cat"}]},
            headers=headers,
        )
        assert answer.status_code == 200, answer.text
        quoted = answer.headers["x-reef-agent-record-id"]
        report = {"feedback": {"correction": "cat"}, "references": [quoted]}
        posted = await client.post("/reef/report", json=report, headers=headers)
        assert posted.status_code == 200, posted.text
        report_id = posted.json()["agent_record_id"]
        empty = await client.post("/reef/report", json={"references": [quoted]}, headers=headers)
        assert (empty.status_code, empty.json()["error"]["code"]) == (400, "empty_report")
        fate = await client.get(f"/reef/reports/{report_id}", headers=headers)
        assert fate.status_code == 200 and fate.json()["status"] == "pending"  # no join here
        events = await ordered_events(ctx.store, JoinProcessor.inputs)
    (submitted,) = [e for e in events if isinstance(e, ReportSubmitted)]
    assert submitted.score is None
    join, state = JoinProcessor(), DictState()
    (joined,) = [o for event in events for o in join.step(state, event)]
    assert isinstance(joined, SampleJoined)
    assert (joined.report_id, joined.references, joined.score) == (report_id, [quoted], None)
    assert build_recipe("sao").admit(sample_from_event(joined), 0) == "no_score"
