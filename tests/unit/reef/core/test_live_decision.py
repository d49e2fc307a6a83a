"""The live decision (reef.core.live_decision, reef.core.betting): its rules one by one,
and the statistical rule on simulated score streams.

Simulation: every exchange goes to the candidate with probability ``share``, fails with
probability 2%, and is scored (Bernoulli scores unless said otherwise); the decision is
looked at after every exchange, as the controller will after every report. Alpha 0.05,
min_exchanges 20 per arm, a head scoring 0.6. The seeds are fixed, so the simulation is
deterministic and gives these figures (the first row's rate is asserted exactly):

==============================================  =====  ========  ===========  =========
candidate                                       runs   promoted  rolled back  exchanges
==============================================  =====  ========  ===========  =========
equal (0.6), share 0.5                          2,000  1.70%     2.35%        300 max
same mean, other law (uniform [0.2, 1])         500    1.40%     3.60%        300 max
worse (0.55), share 0.5                         2,000  0.30%     7.20%        300 max
better (0.75), share 0.5                        300    99.7%     0%           1,500 max
better (0.75), 10% canary, head_group 9         200    100%      0%           4,000 max
score equal, 10% errors against 2%              200    1.5%      96.5%        2,000 max
==============================================  =====  ========  ===========  =========

So an equal or worse candidate is promoted well under alpha (the test is conservative:
Ville's bound is not tight). The better candidate is promoted after a median of 253
exchanges (90th percentile 617) at share 0.5, and of 701 (90th percentile 1,835) as a 10%
canary; the failing one is rolled back for its errors after a median of 266. The same
equal-candidate streams judged by a one-sided z-test at 5%, looked at after every
exchange, promote in 21.5% of runs: the simulation does catch a rule that is not valid
under peeking.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from reef.core.betting import PAIR_BACKLOG, BettingTest, PairedDifference
from reef.core.live_decision import Arm, DecisionRule, LiveComparison

ALPHA = 0.05
RULE = DecisionRule(alpha=ALPHA, min_exchanges=20)
Score = Callable[[random.Random], float]


def bernoulli(p: float) -> Score:
    return lambda rng: 1.0 if rng.random() < p else 0.0


def uniform(low: float, high: float) -> Score:
    return lambda rng: low + (high - low) * rng.random()


@dataclass
class Run:
    verdict: str
    reason: str | None
    exchanges: int
    naive_promoted: bool = False


def simulate(
    seed: int,
    *,
    head: Score,
    candidate: Score,
    share: float = 0.5,
    horizon: int,
    rule: DecisionRule = RULE,
    head_errors: float = 0.02,
    candidate_errors: float = 0.02,
    naive: bool = False,
) -> Run:
    """One rollout, decided after every exchange, to a verdict or ``horizon`` exchanges.
    ``naive`` also runs a one-sided z-test at 5% on the running means at every look."""
    rng = random.Random(seed)
    comparison = LiveComparison(rule)
    naive_promoted = False
    for n in range(1, horizon + 1):
        if rng.random() < share:
            comparison.record_exchange("candidate", error=rng.random() < candidate_errors)
            comparison.record_score("candidate", candidate(rng))
        else:
            comparison.record_exchange("head", error=rng.random() < head_errors)
            comparison.record_score("head", head(rng))
        decision = comparison.decide(0.0)
        if naive and not naive_promoted:
            naive_promoted = z_test_promotes(comparison)
        if decision.verdict != "continue":
            return Run(decision.verdict, decision.reason, n, naive_promoted)
    return Run("continue", None, horizon, naive_promoted)


def z_test_promotes(comparison: LiveComparison) -> bool:
    """A fixed-sample test of two proportions: valid once, not when looked at often."""
    h, c = comparison.head, comparison.candidate
    if min(h.scores, c.scores) < RULE.min_exchanges:
        return False
    ph, pc = h.score_sum / h.scores, c.score_sum / c.scores
    pooled = (h.score_sum + c.score_sum) / (h.scores + c.scores)
    se = math.sqrt(pooled * (1 - pooled) * (1 / h.scores + 1 / c.scores))
    return se > 0 and (pc - ph) / se > 1.645


def rate(runs: list[Run], verdict: str) -> float:
    return sum(r.verdict == verdict for r in runs) / len(runs)


# -- the statistical rule on simulated streams --------------------------------------------


def test_an_equal_candidate_is_promoted_at_most_alpha_of_the_time() -> None:
    runs = [
        simulate(seed, head=bernoulli(0.6), candidate=bernoulli(0.6), horizon=300, naive=True)
        for seed in range(2000)
    ]
    promoted = rate(runs, "promote")
    assert promoted <= ALPHA, promoted
    assert promoted == pytest.approx(0.017, abs=0.0005)  # the figure in the docstring
    naive = sum(r.naive_promoted for r in runs) / len(runs)
    assert naive > 2 * ALPHA, naive  # looking often breaks a fixed-sample test


def test_an_equal_mean_with_another_law_is_promoted_at_most_alpha_of_the_time() -> None:
    """No variance is assumed: a uniform candidate against a Bernoulli head, same mean."""
    runs = [
        simulate(seed, head=bernoulli(0.6), candidate=uniform(0.2, 1.0), horizon=300)
        for seed in range(500)
    ]
    assert rate(runs, "promote") <= ALPHA, rate(runs, "promote")


def test_a_worse_candidate_is_promoted_at_most_alpha_of_the_time() -> None:
    runs = [
        simulate(seed, head=bernoulli(0.6), candidate=bernoulli(0.55), horizon=300)
        for seed in range(2000)
    ]
    assert rate(runs, "promote") <= ALPHA, rate(runs, "promote")
    assert rate(runs, "roll_back") > rate(runs, "promote")


def test_a_clearly_better_candidate_is_promoted_within_1500_exchanges() -> None:
    runs = [
        simulate(seed, head=bernoulli(0.6), candidate=bernoulli(0.75), horizon=1500)
        for seed in range(300)
    ]
    assert rate(runs, "promote") >= 0.95, rate(runs, "promote")
    exchanges = [r.exchanges for r in runs if r.verdict == "promote"]
    assert statistics.median(exchanges) <= 400, statistics.median(exchanges)


def test_a_small_canary_compares_with_head_averages() -> None:
    """A 10% canary: each candidate score meets the mean of 9 head scores."""
    rule = DecisionRule(alpha=ALPHA, min_exchanges=20, head_group=9)
    runs = [
        simulate(
            seed, head=bernoulli(0.6), candidate=bernoulli(0.75), share=0.1, horizon=4000, rule=rule
        )
        for seed in range(200)
    ]
    assert rate(runs, "promote") >= 0.95, rate(runs, "promote")
    exchanges = [r.exchanges for r in runs if r.verdict == "promote"]
    assert statistics.median(exchanges) <= 1000, statistics.median(exchanges)


def test_a_candidate_that_fails_more_often_is_rolled_back_for_its_errors() -> None:
    runs = [
        simulate(
            seed,
            head=bernoulli(0.6),
            candidate=bernoulli(0.6),
            horizon=2000,
            candidate_errors=0.10,
        )
        for seed in range(200)
    ]
    errors = sum(r.verdict == "roll_back" and r.reason == "errors" for r in runs) / len(runs)
    assert errors >= 0.95, errors


# -- the rules, one by one ----------------------------------------------------------------


def feed(comparison: LiveComparison, head: list[float], candidate: list[float]) -> None:
    for h, c in zip(head, candidate, strict=True):
        comparison.record_exchange("head", error=False)
        comparison.record_score("head", h)
        comparison.record_exchange("candidate", error=False)
        comparison.record_score("candidate", c)


def test_no_verdict_before_min_exchanges_on_both_arms() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=30))
    feed(comparison, [0.0] * 29, [1.0] * 29)  # overwhelming, but too few
    decision = comparison.decide(10.0)
    assert decision.verdict == "continue"
    assert decision.p_better < ALPHA  # the evidence is there, and kept
    feed(comparison, [0.0], [1.0])
    assert comparison.decide(10.0)[:2] == ("promote", "statistic")


def test_the_deadline_rolls_back_an_unproven_candidate() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=5, max_duration_s=60.0))
    feed(comparison, [0.5] * 10, [0.5] * 10)
    assert comparison.decide(59.9).verdict == "continue"
    assert comparison.decide(60.0)[:2] == ("roll_back", "max_duration")


def test_the_deadline_rolls_back_even_before_min_exchanges() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=500, max_duration_s=60.0))
    assert comparison.decide(61.0)[:2] == ("roll_back", "max_duration")


def test_a_candidate_proven_better_at_the_deadline_is_promoted() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=5, max_duration_s=60.0))
    feed(comparison, [0.0] * 40, [1.0] * 40)
    assert comparison.decide(3600.0)[:2] == ("promote", "statistic")


def test_a_candidate_proven_worse_is_rolled_back_early() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=5))
    feed(comparison, [1.0] * 40, [0.0] * 40)
    decision = comparison.decide(1.0)
    assert decision[:2] == ("roll_back", "statistic")
    assert decision.p_worse <= ALPHA < decision.p_better


def test_errors_outrank_a_better_score() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=5))
    for _ in range(60):
        comparison.record_exchange("head", error=False)
        comparison.record_score("head", 0.0)
        comparison.record_exchange("candidate", error=True)
        comparison.record_score("candidate", 1.0)
    decision = comparison.decide(1.0)
    assert decision[:2] == ("roll_back", "errors")
    assert decision.p_better <= ALPHA and decision.p_more_errors <= ALPHA


def test_the_same_outcomes_reach_the_same_decision_at_the_same_outcome() -> None:
    """Replay: the decision is a function of the outcomes in log order."""

    def decisions() -> list[tuple[str, str | None, float]]:
        rng = random.Random(5)
        comparison = LiveComparison(RULE)
        out: list[tuple[str, str | None, float]] = []
        for _ in range(300):
            arm: Arm = "candidate" if rng.random() < 0.5 else "head"
            comparison.record_exchange(arm, error=rng.random() < 0.05)
            comparison.record_score(arm, rng.random() ** (0.7 if arm == "candidate" else 1.0))
            d = comparison.decide(0.0)
            out.append((d.verdict, d.reason, d.evidence_better))
        return out

    assert decisions() == decisions()


def test_figures_name_both_arms_and_the_statistic() -> None:
    comparison = LiveComparison(DecisionRule(min_exchanges=2))
    feed(comparison, [0.5, 0.25], [1.0, 0.75])
    comparison.record_exchange("head", error=True)
    figures = comparison.figures(comparison.decide(0.0))
    assert figures["head"] == {
        "exchanges": 3,
        "errors": 1,
        "error_rate": pytest.approx(1 / 3, abs=1e-6),
        "scores": 2,
        "mean_score": 0.375,
        "slow": 0,
        "slow_rate": 0.0,
    }
    assert figures["candidate"]["mean_score"] == 0.875
    assert figures["pairs"] == 2 and figures["mean_difference"] == 0.5
    assert figures["p_better"] <= 1.0 and figures["alpha"] == 0.05


# -- latency: the share of exchanges slower than the objective ------------------------------


def latency_run(seed: int, head_slow: float, candidate_slow: float, slo: float | None) -> str:
    """A 20% canary with equal scores: the verdict after 3000 exchanges (or before)."""
    rng = random.Random(seed)
    comparison = LiveComparison(DecisionRule(min_exchanges=20, head_group=4, latency_slo_ms=slo))
    for _ in range(3000):
        arm: Arm = "candidate" if rng.random() < 0.2 else "head"
        slow = rng.random() < (candidate_slow if arm == "candidate" else head_slow)
        comparison.record_exchange(arm, error=False, latency_ms=900.0 if slow else 100.0)
        comparison.record_score(arm, 0.5)
        decision = comparison.decide(0.0)
        if decision.verdict != "continue":
            return f"{decision.verdict}/{decision.reason}"
    return "continue"


def test_a_candidate_slower_than_the_objective_more_often_is_rolled_back_for_latency() -> None:
    verdicts = [latency_run(seed, 0.05, 0.30, slo=500.0) for seed in range(100)]
    rolled = verdicts.count("roll_back/latency") / len(verdicts)
    assert rolled >= 0.95, rolled


def test_an_equally_fast_candidate_is_rolled_back_for_latency_at_most_alpha_of_the_time() -> None:
    verdicts = [latency_run(seed, 0.2, 0.2, slo=500.0) for seed in range(200)]
    rolled = verdicts.count("roll_back/latency") / len(verdicts)
    assert rolled <= ALPHA, rolled


def test_without_an_objective_latency_is_shown_never_tested() -> None:
    verdicts = {latency_run(seed, 0.0, 1.0, slo=None) for seed in range(20)}
    assert verdicts == {"continue"}


def test_latency_figures_and_a_snapshot_from_before_latency_was_tested() -> None:
    rule = DecisionRule(min_exchanges=2, latency_slo_ms=250.0)
    comparison = LiveComparison(rule)
    comparison.record_exchange("candidate", error=False, latency_ms=300.0)
    comparison.record_exchange("candidate", error=False, latency_ms=200.0)
    comparison.record_exchange("head", error=False)  # no latency known: not flagged
    figures = comparison.figures(comparison.decide(0.0))
    assert (figures["candidate"]["slow"], figures["candidate"]["slow_rate"]) == (1, 0.5)
    assert figures["head"]["slow"] == 0 and figures["latency_slo_ms"] == 250.0
    old = comparison.snapshot()
    del old["slow"]
    old["head"], old["candidate"] = old["head"][:4], old["candidate"][:4]
    restored = LiveComparison.restored(rule, old)
    assert restored.candidate.slow == 0 and restored.slow.test.count == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"latency_slo_ms": 0.0},
        {"alpha": 0.0},
        {"alpha": 1.0},
        {"min_exchanges": 0},
        {"max_duration_s": 0},
        {"head_group": 0},
    ],
)
def test_a_rule_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        DecisionRule(**kwargs)  # type: ignore[arg-type]


def test_outcomes_outside_their_range_are_refused() -> None:
    comparison = LiveComparison(RULE)
    with pytest.raises(ValueError):
        comparison.record_score("head", 1.5)
    with pytest.raises(ValueError):
        BettingTest().add(-1.01)
    assert comparison.head.scores == 0  # a refused score is not counted


# -- the betting test and the pairing ----------------------------------------------------


def test_evidence_starts_at_nothing_and_only_grows_with_a_positive_mean() -> None:
    test = BettingTest()
    assert (test.p_up, test.p_down, test.mean) == (1.0, 1.0, None)
    previous = 1.0
    for _ in range(100):
        test.add(0.3)
        assert test.p_up <= previous
        previous = test.p_up
    assert test.p_up < 1e-6 and test.p_down == 1.0
    assert test.mean == pytest.approx(0.3)


def test_a_head_group_is_averaged_and_paired_in_arrival_order() -> None:
    paired = PairedDifference(group=3)
    paired.add_candidate(1.0)
    paired.add_candidate(0.0)
    for x in (0.0, 0.5, 1.0):  # one group: mean 0.5, meets the first candidate outcome
        paired.add_head(x)
    assert (paired.test.count, paired.test.mean) == (1, 0.5)
    for x in (0.0, 0.0, 0.3):
        paired.add_head(x)
    assert paired.test.count == 2
    assert paired.test.mean == pytest.approx((0.5 + (0.0 - 0.1)) / 2)


def test_a_stream_with_no_partner_keeps_a_bounded_backlog() -> None:
    paired = PairedDifference()
    for _ in range(PAIR_BACKLOG + 5):
        paired.add_head(1.0)
    paired.add_candidate(0.0)
    assert paired.test.count == 1
    assert len(paired._heads) == PAIR_BACKLOG - 1
