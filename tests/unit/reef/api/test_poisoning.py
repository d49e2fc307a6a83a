"""Poisoning controls, pure: the report rate limiter (clock injected), the batching rules
(per-reporter cap, distinct-reporter minimum) over real Sample objects and the real
Batcher, the reporter carried from a report to its sample, and the settings.

The same controls run through the app in tests/api/test_report_rate_limits.py (the rate
limits) and in a real ``reef serve`` in tests/e2e/test_poisoning.py (the batching rules).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from recipes.base import Batching, RecipeConfig
from recipes.errors import RecipeConfigError
from recipes.registry import build_recipe
from recipes.samples import Sample, sample_from_event
from reef.api.ratelimit import SWEEP_AT, Rate, ReportLimiter, TokenBuckets, limiter_from
from reef.core.errors import ConfigError
from reef.core.events import InferenceRecorded, ReportSubmitted, SampleJoined
from reef.core.ids import content_hash, scenario_tag
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.settings import load_settings
from trainers.batcher import Batcher

FAKE = "tests.support.fake_recipe:FakeRecipe"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# ---------------------------------------------------------------------------
# The limiter


def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    buckets = TokenBuckets(Rate(per_second=2.0, burst=3))
    for _ in range(3):
        assert buckets.wait("a", 0.0) == 0.0
        buckets.take("a", 0.0)
    assert buckets.wait("a", 0.0) == pytest.approx(0.5)  # one report refills in 1/2 s
    assert buckets.wait("a", 0.25) == pytest.approx(0.25)
    assert buckets.wait("a", 0.5) == 0.0
    buckets.take("a", 0.5)
    assert buckets.wait("a", 0.5) == pytest.approx(0.5)
    # a long idle refills to the burst, never beyond it
    assert buckets.level("a", 100.0) == 3.0


def test_a_clock_that_steps_back_refills_nothing() -> None:
    buckets = TokenBuckets(Rate(per_second=1.0, burst=1))
    buckets.take("a", 10.0)
    assert buckets.wait("a", 5.0) == pytest.approx(1.0)
    assert buckets.wait("a", 10.5) == pytest.approx(0.5)


def test_full_buckets_are_forgotten_so_memory_stays_bounded() -> None:
    buckets = TokenBuckets(Rate(per_second=1.0, burst=2))
    for n in range(SWEEP_AT - 1):
        buckets.take(f"idle-{n}", 0.0)
    assert len(buckets) == SWEEP_AT - 1
    buckets.take("recent", 10.0)  # the idle ones are full again by now: swept
    assert len(buckets) == 1
    assert buckets.wait("recent", 10.0) == 0.0
    assert buckets.level("recent", 10.0) == pytest.approx(1.0)
    assert buckets.level("idle-0", 10.0) == 2.0  # forgotten = full, as it should be


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0.5), (float("inf"), 1)])
def test_a_rate_must_be_positive_and_a_burst_at_least_one(rate: float, burst: float) -> None:
    with pytest.raises(ValueError):
        Rate(rate, burst)


def test_per_token_limits_are_independent_of_each_other() -> None:
    clock = FakeClock()
    limiter = ReportLimiter(Rate(0.5, 2), None, clock)
    assert limiter.admit("alice", "s") is None
    assert limiter.admit("alice", "s") is None
    refusal = limiter.admit("alice", "s")
    assert refusal is not None and refusal.limit == "token"
    assert refusal.retry_after_s == pytest.approx(2.0)
    assert refusal.retry_after_header == "2"
    # another token, even on the same scenario, is not affected
    assert limiter.admit("bob", "s") is None
    assert limiter.admit("alice", "other") is not None  # the token's limit spans scenarios
    clock.advance(2.0)
    assert limiter.admit("alice", "s") is None
    assert limiter.admit("alice", "s") is not None


def test_per_scenario_limits_hold_across_tokens_and_are_independent() -> None:
    clock = FakeClock()
    limiter = ReportLimiter(None, Rate(1.0, 3), clock)
    for token in ("a", "b", "c"):
        assert limiter.admit(token, "busy") is None
    refusal = limiter.admit("d", "busy")
    assert refusal is not None and refusal.limit == "scenario"
    assert limiter.admit("d", "quiet") is None  # another scenario is not affected


def test_a_refused_report_spends_nothing_from_either_bucket() -> None:
    clock = FakeClock()
    limiter = ReportLimiter(Rate(1.0, 1), Rate(1.0, 2), clock)
    assert limiter.admit("a", "s") is None
    # a's bucket is empty: refused, and the scenario's bucket keeps its report for b
    assert limiter.admit("a", "s") is not None
    assert limiter.admit("a", "s") is not None
    assert limiter.admit("b", "s") is None
    refusal = limiter.admit("c", "s")
    assert refusal is not None and refusal.limit == "scenario"


def test_the_refusal_names_the_longer_wait() -> None:
    clock = FakeClock()
    limiter = ReportLimiter(Rate(1.0, 1), Rate(0.1, 1), clock)
    assert limiter.admit("a", "s") is None
    refusal = limiter.admit("a", "s")
    assert refusal is not None
    assert refusal.limit == "scenario"
    assert refusal.retry_after_s == pytest.approx(10.0)
    clock.advance(0.25)
    refusal = limiter.admit("b", "s")
    assert refusal is not None and refusal.retry_after_header == "10"  # 9.75 s, rounded up


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    clock = FakeClock()
    limiter = ReportLimiter(Rate(100.0, 1), None, clock)
    assert limiter.admit("a", "s") is None
    refusal = limiter.admit("a", "s")
    assert refusal is not None and refusal.retry_after_s == pytest.approx(0.01)
    assert refusal.retry_after_header == "1"


def test_no_rate_configured_means_no_limit() -> None:
    limiter = limiter_from(load_settings(environ={}).settings.reports)
    assert not limiter.enabled
    assert all(limiter.admit("a", "s") is None for _ in range(10_000))


def test_rate_settings_follow_flags_over_file_over_env(tmp_path: Path) -> None:
    environ = {"REEF_REPORT_RATE_PER_TOKEN": "5", "REEF_REPORT_BURST_PER_SCENARIO": "7"}
    config = tmp_path / "reef.yaml"
    config.write_text("reef:\n  report:\n    rate_per_token: 3\n    rate_per_scenario: 50\n")
    loaded = load_settings({"report_rate_per_scenario": 40.0}, config, environ)
    settings = loaded.settings
    assert settings.reports.rate_per_token == 3.0
    assert settings.reports.rate_per_scenario == 40.0
    assert settings.reports.burst_per_scenario == 7
    assert settings.reports.burst_per_token == 20
    assert loaded.sources["report_rate_per_token"] == "file"
    assert loaded.sources["report_rate_per_scenario"] == "flag"
    assert loaded.sources["report_burst_per_scenario"] == "env"
    clock = FakeClock()
    limiter = limiter_from(settings.reports, clock)
    assert limiter.enabled
    assert all(limiter.admit("a", f"s{n}") is None for n in range(20))
    refusal = limiter.admit("a", "s")
    assert refusal is not None and refusal.limit == "token"


@pytest.mark.parametrize(
    "environ",
    [
        {"REEF_REPORT_RATE_PER_TOKEN": "0"},
        {"REEF_REPORT_RATE_PER_TOKEN": "-1"},
        {"REEF_REPORT_RATE_PER_SCENARIO": "nan"},
        {"REEF_REPORT_BURST_PER_TOKEN": "0"},
    ],
)
def test_bad_rate_settings_fail_at_start(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="report_"):
        load_settings(environ=environ)


# ---------------------------------------------------------------------------
# Batching rules


def make(n: int, reporter: str | None, *, group: str | None = None) -> Sample:
    return Sample(
        sample_id=f"s{n:03d}",
        scenario="s",
        report_id=f"r{n:03d}",
        score=1.0,
        feedback=None,
        metadata={"g": group} if group is not None else {},
        turns=(),
        release_ids=("rel",),
        offset=n,
        reporter=reporter,
    )


def units(*reporters: str | None) -> list[tuple[Sample, ...]]:
    return [(make(n, who),) for n, who in enumerate(reporters)]


def ids(chosen: list[tuple[Sample, ...]] | None) -> list[str]:
    assert chosen is not None
    return [s.sample_id for unit in chosen for s in unit]


def test_defaults_change_nothing() -> None:
    rules = Batching(batch_size=3)
    flood = units("a", "a", "a", "a")
    assert ids(rules.choose(flood)) == ["s000", "s001", "s002"]
    assert rules.choose(flood[:2]) is None
    assert ids(rules.choose(flood[:2], partial=True)) == ["s000", "s001"]


def test_the_cap_holds_a_flooding_reporter_back_for_later_batches() -> None:
    rules = Batching(batch_size=3, max_per_reporter=1)
    waiting = units("a", "a", "a", "b", "a", "c")
    assert ids(rules.choose(waiting)) == ["s000", "s003", "s005"]
    # a alone: one per batch, and only as a partial batch
    only_a = units("a", "a", "a")
    assert rules.choose(only_a) is None
    assert ids(rules.choose(only_a, partial=True)) == ["s000"]


def test_the_cap_counts_units_and_a_unit_counts_for_each_of_its_reporters() -> None:
    rules = Batching(batch_size=2, group_by="g", group_size=2, max_per_reporter=1)
    mixed = (make(0, "a"), make(1, "b"))
    a_again = (make(2, "a"), make(3, "a"))
    c_only = (make(4, "c"), make(5, "c"))
    assert ids(rules.choose([mixed, a_again, c_only])) == ["s000", "s001", "s004", "s005"]


def test_min_distinct_reporters_holds_the_batch_until_enough_reporters() -> None:
    rules = Batching(batch_size=4, min_distinct_reporters=2)
    only_a = units("a", "a", "a", "a", "a")
    assert rules.choose(only_a) is None
    assert rules.choose(only_a, partial=True) is None  # max_wait does not bypass it
    # one more reporter: the last place is kept for it
    assert ids(rules.choose([*only_a, (make(9, "b"),)])) == ["s000", "s001", "s002", "s009"]


def test_min_distinct_keeps_as_many_places_as_reporters_still_needed() -> None:
    rules = Batching(batch_size=4, min_distinct_reporters=3)
    waiting = units("a", "a", "a", "b", "b", "b", "c")
    assert ids(rules.choose(waiting)) == ["s000", "s001", "s003", "s006"]
    assert rules.choose(waiting[:6], partial=True) is None


def test_cap_and_minimum_together() -> None:
    rules = Batching(batch_size=4, max_per_reporter=2, min_distinct_reporters=2)
    assert rules.choose(units("a", "a", "a", "a")) is None
    assert ids(rules.choose(units("a", "a", "a", "a", "b", "b", "b"))) == [
        "s000",
        "s001",
        "s004",
        "s005",
    ]


def test_unrecorded_reporters_count_as_one() -> None:
    rules = Batching(batch_size=2, max_per_reporter=1)
    assert rules.choose(units(None, None, None)) is None
    assert ids(rules.choose(units(None, None, "a"))) == ["s000", "s002"]


def test_an_unreachable_minimum_is_a_config_error() -> None:
    with pytest.raises(RecipeConfigError, match="min_distinct_reporters"):
        build_recipe(FAKE, {"batching": {"batch_size": 2, "min_distinct_reporters": 3}})
    with pytest.raises(RecipeConfigError, match="max_per_reporter"):
        build_recipe(FAKE, {"batching": {"max_per_reporter": 0}})
    config = RecipeConfig.model_validate(
        {"batching": {"batch_size": 2, "group_size": 2, "min_distinct_reporters": 4}}
    )
    assert config.batching.min_distinct_reporters == 4


def test_the_batcher_takes_capped_batches_and_never_a_sample_twice() -> None:
    batcher = Batcher(Batching(batch_size=2, max_per_reporter=1, min_distinct_reporters=2))
    flood = [make(n, "a") for n in range(5)]
    for sample in flood:
        batcher.add(sample, None)
    assert not batcher.ready("s")
    assert batcher.take("s", partial=True) is None
    batcher.add(make(10, "b"), None)
    assert batcher.ready("s")
    first = batcher.take("s")
    assert first is not None and first.sample_ids == ["s000", "s010"]
    assert batcher.waiting_count("s") == 4  # a's other samples wait, none is dropped
    assert batcher.take("s") is None
    batcher.add(make(11, "c"), None)
    second = batcher.take("s")
    assert second is not None and second.sample_ids == ["s001", "s011"]
    batcher.release(first.sample_ids + second.sample_ids)
    assert batcher.waiting_count("s") == 3
    assert all(sid in batcher for sid in ("s002", "s003", "s004"))
    batcher.add(make(2, "a"), None)  # a redelivered sample is not added twice
    assert batcher.waiting_count("s") == 3


# ---------------------------------------------------------------------------
# The reporter, from the report to the sample


def test_the_join_carries_the_reporter_into_the_sample() -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    receipt = scenario_tag("s") + "0" * 24
    join = JoinProcessor()
    state = DictState()
    content = {"score": 1.0, "feedback": "ok", "references": [receipt], "metadata": {}}
    report = ReportSubmitted(
        event_id="rep-1",
        scenario="s",
        occurred_at=at,
        producer="test",
        score=1.0,
        feedback_json='"ok"',
        references=[receipt],
        metadata_json="{}",
        content_hash=content_hash(content),
        reporter="0123456789ab",
    )
    assert join.step(state, report) == []  # parked: the exchange is not recorded yet
    record = InferenceRecorded(
        event_id=receipt,
        scenario="s",
        occurred_at=at + timedelta(seconds=1),
        producer="test",
        dialect="openai",
        route="/v1/chat/completions",
        release_id="rel",
        stream=False,
        status=200,
        complete=True,
        latency_ms=1.0,
        upstream_latency_ms=1.0,
        request_json=json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
        response_json=json.dumps({"choices": [{"message": {"content": "hello"}}]}),
    )
    (joined,) = join.step(state, record)
    assert isinstance(joined, SampleJoined) and joined.reporter == "0123456789ab"
    assert sample_from_event(joined).reporter == "0123456789ab"


def test_a_sample_without_a_recorded_reporter_reads_as_none() -> None:
    event = SampleJoined(
        event_id="x",
        scenario="s",
        occurred_at=datetime(2025, 1, 1, tzinfo=UTC),
        producer="test",
        report_id="r",
        references=[],
        trajectory_json="[]",
        score=1.0,
        feedback_json="{}",
        metadata_json="{}",
        release_ids=[],
    )
    assert sample_from_event(event).reporter is None
