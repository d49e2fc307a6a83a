"""The live decision of a rollout: promote the candidate, roll it back, or keep watching.

A rollout serves two arms at once, the head and the candidate. Every exchange an arm
serves adds an error flag (the exchange failed or not); a report or a computed judgement
on it adds a score in [0, 1]. :class:`LiveComparison` pairs the candidate's outcomes with
the head's (:class:`reef.core.betting.PairedDifference`) and runs sequential tests by
betting on the differences (:class:`reef.core.betting.BettingTest`). It may decide after
every outcome, as often as the caller looks:

1. Fewer than ``min_exchanges`` exchanges on either arm: no verdict yet (go to 5).
2. The candidate's error rate proven higher (``p_more_errors <= alpha``): **roll back**
   (``errors``). With a latency objective (``latency_slo_ms``), the same for the share
   of exchanges slower than it (``p_slower <= alpha``): **roll back** (``latency``).
   Latency is tested as that share, a flag per exchange like an error, because the
   tests need outcomes on a bounded range and an objective fixed before the rollout
   (never one estimated from the arms) keeps them valid; without an objective latency
   is shown, not tested.
3. The candidate's mean score proven lower (``p_worse <= alpha``): **roll back**
   (``statistic``).
4. The candidate's mean score proven higher (``p_better <= alpha``): **promote**
   (``statistic``).
5. ``max_duration_s`` reached with no verdict: **roll back** (``max_duration``).
   Otherwise **continue**.

**The rule, and why it.** ``p_better`` is the always-valid p-value of a test
supermartingale against "the candidate's mean score is at most the head's": by Ville's
inequality a candidate that is equal or worse is promoted with probability at most
``alpha``, for any law of the scores on [0, 1] (no normality, no variance assumed), with
the decision looked at after every report and the rollout stopped at any time. A
fixed-sample test looked at after every report has no such bound (its error grows with
the looks); a normal-mixture SPRT needs a known or plugged-in variance and holds only
asymptotically; empirical-Bernstein confidence sequences per arm, compared through a
union bound, hold too, but each arm's bound pays for its own half of ``alpha`` and for
every mean it might cover, so they need several times the exchanges betting needs to
decide on the same difference. Betting tests only the null at the boundary, with one test
carrying the whole ``alpha``, and its aGRAPA bets approximate the growth-optimal (Kelly)
bet when the candidate is better. The two roll-back tests run at ``alpha`` too (rolling
back is the safe error). A candidate not proven better is rolled back at the deadline:
waiting never makes an unproven candidate the head.
``tests/unit/reef/core/test_live_decision.py`` simulates the error rates.

Pure: no clock (the caller passes the elapsed time), no I/O; the outcomes' order is the
log's, so a replay reaches the same decision at the same outcome.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

from reef.core.betting import PairedDifference

Verdict = Literal["continue", "promote", "roll_back"]
Arm = Literal["head", "candidate"]

#: why a rollout ended: the score test, the error test, the deadline, or an operator
REASONS: Final = ("statistic", "errors", "latency", "max_duration", "manual")


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRule:
    """The knobs of the live decision (a rollout policy's, see reef.core.rollouts)."""

    #: the most often an equal or worse candidate may be promoted
    alpha: float = 0.05
    #: exchanges each arm must have served before any verdict but the deadline's
    min_exchanges: int = 100
    #: seconds after which a candidate not yet proven better is rolled back
    max_duration_s: float = 86_400.0
    #: head outcomes averaged against each candidate outcome (about head share /
    #: candidate share: 9 for a 10% canary)
    head_group: int = 1
    #: the latency objective: an exchange slower than this counts as slow (None: none)
    latency_slo_ms: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), not {self.alpha}")
        if self.min_exchanges < 1 or self.max_duration_s <= 0 or self.head_group < 1:
            raise ValueError("min_exchanges, max_duration_s and head_group must be positive")
        if self.latency_slo_ms is not None and not self.latency_slo_ms > 0:
            raise ValueError("latency_slo_ms must be positive")


class LiveDecision(NamedTuple):
    """The verdict and the statistic behind it, at one moment of a rollout.

    The statistic is each test's evidence: the log of the largest wealth its bets have
    reached (an e-value's log). A test decides when it reaches ``log(1/alpha)``; its
    always-valid p-value is ``exp(-evidence)``.
    """

    verdict: Verdict
    #: one of :data:`REASONS` when the verdict is not ``continue``
    reason: str | None
    #: evidence against "the candidate scores no better than the head" (promote)
    evidence_better: float
    #: evidence against "the candidate scores no worse than the head" (roll back)
    evidence_worse: float
    #: evidence against "the candidate fails no more often than the head" (roll back)
    evidence_more_errors: float
    #: evidence against "the candidate is slow no more often than the head" (roll back)
    evidence_slower: float = 0.0

    @property
    def p_better(self) -> float:
        """Always-valid p-value against "no better": the candidate is promoted at alpha."""
        return math.exp(-self.evidence_better)

    @property
    def p_worse(self) -> float:
        return math.exp(-self.evidence_worse)

    @property
    def p_more_errors(self) -> float:
        return math.exp(-self.evidence_more_errors)

    @property
    def p_slower(self) -> float:
        return math.exp(-self.evidence_slower)


class ArmTally:
    """What one arm has served and scored, for the figures (the tests pair outcomes)."""

    __slots__ = ("errors", "exchanges", "score_sum", "scores", "slow")

    def __init__(self) -> None:
        self.exchanges = self.errors = self.scores = self.slow = 0
        self.score_sum = 0.0

    def snapshot(self) -> list[float]:
        return [self.exchanges, self.errors, self.scores, self.score_sum, self.slow]

    @classmethod
    def restored(cls, values: list[float]) -> ArmTally:
        """(A snapshot taken before latency was tested has four numbers.)"""
        tally = cls()
        exchanges, errors, scores, tally.score_sum = values[:4]
        tally.exchanges, tally.errors, tally.scores = int(exchanges), int(errors), int(scores)
        tally.slow = int(values[4]) if len(values) > 4 else 0
        return tally

    def figures(self) -> dict[str, Any]:
        return {
            "exchanges": self.exchanges,
            "errors": self.errors,
            "error_rate": _ratio(self.errors, self.exchanges),
            "scores": self.scores,
            "mean_score": _ratio(self.score_sum, self.scores),
            "slow": self.slow,
            "slow_rate": _ratio(self.slow, self.exchanges),
        }


class LiveComparison:
    """Both arms' outcomes and the decision over them (see the module docstring)."""

    __slots__ = ("_threshold", "candidate", "errors", "head", "rule", "scores", "slow")

    def __init__(self, rule: DecisionRule) -> None:
        self.rule = rule
        self.head = ArmTally()
        self.candidate = ArmTally()
        self.scores = PairedDifference(rule.head_group)
        self.errors = PairedDifference(rule.head_group)
        #: paired "slower than the objective" flags (fed only with an objective)
        self.slow = PairedDifference(rule.head_group)
        #: a test decides once its log-wealth reaches log(1/alpha)
        self._threshold = math.log(1.0 / rule.alpha)

    def snapshot(self) -> dict[str, Any]:
        """Both arms' state, JSON-ready and exact (the rule is the caller's to keep): a
        processor stores it between events and :meth:`restored` continues where it was."""
        return {
            "head": self.head.snapshot(),
            "candidate": self.candidate.snapshot(),
            "scores": self.scores.snapshot(),
            "errors": self.errors.snapshot(),
            "slow": self.slow.snapshot(),
        }

    @classmethod
    def restored(cls, rule: DecisionRule, values: dict[str, Any]) -> LiveComparison:
        comparison = cls(rule)
        comparison.head = ArmTally.restored(values["head"])
        comparison.candidate = ArmTally.restored(values["candidate"])
        comparison.scores = PairedDifference.restored(values["scores"])
        comparison.errors = PairedDifference.restored(values["errors"])
        if "slow" in values:  # absent from a snapshot taken before latency was tested
            comparison.slow = PairedDifference.restored(values["slow"])
        return comparison

    def record_exchange(self, arm: Arm, *, error: bool, latency_ms: float | None = None) -> None:
        """An exchange the arm served (``error``: it failed: no complete answer;
        ``latency_ms``: how long it took, compared with the rule's objective)."""
        tally = self.candidate if arm == "candidate" else self.head
        tally.exchanges += 1
        tally.errors += error
        pairs = [(self.errors, 1.0 if error else 0.0)]
        slo = self.rule.latency_slo_ms
        if slo is not None and latency_ms is not None:
            slow = latency_ms > slo
            tally.slow += slow
            pairs.append((self.slow, 1.0 if slow else 0.0))
        for paired, flag in pairs:
            if arm == "candidate":
                paired.add_candidate(flag)
            else:
                paired.add_head(flag)

    def record_score(self, arm: Arm, score: float) -> None:
        """A score in [0, 1] for an exchange the arm served."""
        if arm == "candidate":
            self.scores.add_candidate(score)
        else:
            self.scores.add_head(score)
        tally = self.candidate if arm == "candidate" else self.head
        tally.scores += 1
        tally.score_sum += score

    def decide(self, elapsed_s: float) -> LiveDecision:
        """The decision now, ``elapsed_s`` seconds after the rollout started."""
        verdict, reason = self._verdict()
        if verdict == "continue" and elapsed_s >= self.rule.max_duration_s:
            verdict, reason = "roll_back", "max_duration"
        scores = self.scores.test
        return LiveDecision(
            verdict,
            reason,
            scores.max_log_up,
            scores.max_log_down,
            self.errors.test.max_log_up,
            self.slow.test.max_log_up,
        )

    def _verdict(self) -> tuple[Verdict, str | None]:
        if min(self.head.exchanges, self.candidate.exchanges) < self.rule.min_exchanges:
            return "continue", None
        if self.errors.test.max_log_up >= self._threshold:
            return "roll_back", "errors"
        if self.slow.test.max_log_up >= self._threshold:
            return "roll_back", "latency"
        if self.scores.test.max_log_down >= self._threshold:
            return "roll_back", "statistic"
        if self.scores.test.max_log_up >= self._threshold:
            return "promote", "statistic"
        return "continue", None

    def figures(self, decision: LiveDecision) -> dict[str, Any]:
        """What a ``RolloutDecided`` carries and the status shows: per arm, and the
        statistic (the tests' p-values and the mean paired difference)."""
        return {
            "alpha": self.rule.alpha,
            "head": self.head.figures(),
            "candidate": self.candidate.figures(),
            "pairs": self.scores.test.count,
            "mean_difference": _round(self.scores.test.mean),
            "p_better": _round(decision.p_better),
            "p_worse": _round(decision.p_worse),
            "p_more_errors": _round(decision.p_more_errors),
            "latency_slo_ms": self.rule.latency_slo_ms,
            "p_slower": _round(decision.p_slower),
        }


def _ratio(total: float, count: int) -> float | None:
    return None if count == 0 else round(total / count, 6)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
