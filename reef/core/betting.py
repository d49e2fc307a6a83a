"""Sequential tests by betting: evidence that paired differences have a positive (or a
negative) mean, valid however often it is looked at.

:class:`BettingTest` takes differences ``d`` in [-1, 1] one at a time (a candidate's
outcome minus the head's) and keeps two *test supermartingales* ("testing by betting",
Shafer 2021; Waudby-Smith and Ramdas, JRSS B 2023):

    W_up(t)   = prod (1 + b_i d_i)      b_i >= 0   evidence against "mean(d) <= 0"
    W_down(t) = prod (1 - c_i d_i)      c_i >= 0   evidence against "mean(d) >= 0"

Each bet ``b_i`` (``c_i``) is fixed before ``d_i`` is seen and capped at 1/2, so every
factor is at least 1/2. While the conditional mean of each ``d_i`` is at most 0,
``E[1 + b_i d_i | past] <= 1`` and ``W_up`` is a non-negative supermartingale starting
at 1; Ville's inequality gives ``P(sup_t W_up(t) >= 1/alpha) <= alpha``. So
``p_up = 1 / max_{s <= t} W_up(s)`` is an always-valid p-value: rejecting when it drops to
``alpha`` errs with probability at most ``alpha`` for any stopping rule, any number of
looks and any law of the outcomes on their bounded range. Nothing about the variance is
assumed; the bets only decide how fast evidence grows when the null is false.

The bets are aGRAPA (Waudby-Smith and Ramdas, section 5): ``b = m / (v + m^2)``, the
second-order approximation of the Kelly bet ``argmax E log(1 + b d)``, from the running
mean ``m`` and variance ``v`` of the past differences, smoothed towards ``m = 0`` and
``v = 1/4`` by one pseudo-observation. A positive estimate bets on ``W_up``, a negative
one on ``W_down``, so the two tests share one estimate.

:class:`PairedDifference` forms the differences from two streams of outcomes in [0, 1]
that arrive at different rates: each candidate outcome is paired, in arrival order,
with the mean of the next ``group`` head outcomes (``group`` about the head's share over
the candidate's, so a small canary is compared with a low-variance head average).
Pairing looks only at arrival order, never at values, so a difference's conditional
mean is the candidate's mean minus the head's whenever each stream's outcomes have a
constant conditional mean (the arms share the rollout's window and traffic mix).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Final

#: the largest fraction of wealth bet on one difference (any cap below 1 keeps validity)
MAX_BET: Final = 0.5
#: the smoothing pseudo-observation's variance (a difference's variance is at most 1)
PRIOR_VARIANCE: Final = 0.25
#: outcomes kept per stream while waiting for a partner; beyond it the oldest is dropped
#: (by count alone: dropping never looks at a value, so validity is unchanged)
PAIR_BACKLOG: Final = 10_000


class BettingTest:
    """Two always-valid one-sided tests on the mean of differences in [-1, 1]."""

    __slots__ = (
        "_deviations",
        "_log_down",
        "_log_up",
        "_mean",
        "_sum",
        "_variance",
        "count",
        "max_log_down",
        "max_log_up",
    )

    def __init__(self) -> None:
        self.count = 0
        self._sum = 0.0
        self._deviations = 0.0
        self._mean = 0.0
        self._variance = PRIOR_VARIANCE
        self._log_up = self._log_down = 0.0
        #: log of the largest wealth reached by each test (its evidence so far)
        self.max_log_up = self.max_log_down = 0.0

    def add(self, d: float) -> None:
        """Bet on one difference ``d`` in [-1, 1], then learn from it."""
        if not -1.0 <= d <= 1.0:
            raise ValueError(f"a difference must lie in [-1, 1], not {d}")
        mean = self._mean
        bet = mean / (self._variance + mean * mean)
        if bet > 0.0:
            self._log_up += math.log1p((bet if bet < MAX_BET else MAX_BET) * d)
            if self._log_up > self.max_log_up:
                self.max_log_up = self._log_up
        elif bet < 0.0:
            self._log_down += math.log1p(-(-bet if -bet < MAX_BET else MAX_BET) * d)
            if self._log_down > self.max_log_down:
                self.max_log_down = self._log_down
        t = self.count + 1
        self._sum += d
        self._mean = self._sum / (t + 1)
        self._deviations += (d - self._mean) ** 2
        self._variance = (PRIOR_VARIANCE + self._deviations) / (t + 1)
        self.count = t

    def snapshot(self) -> list[float]:
        """The test's whole state as JSON-ready numbers (exact through JSON: floats
        round-trip by their shortest repr), for a processor's key-value state."""
        return [
            self.count,
            self._sum,
            self._deviations,
            self._mean,
            self._variance,
            self._log_up,
            self._log_down,
            self.max_log_up,
            self.max_log_down,
        ]

    @classmethod
    def restored(cls, values: list[float]) -> BettingTest:
        """The test :meth:`snapshot` was taken of."""
        test = cls()
        (count, test._sum, test._deviations, test._mean, test._variance) = values[:5]
        (test._log_up, test._log_down, test.max_log_up, test.max_log_down) = values[5:]
        test.count = int(count)
        return test

    @property
    def p_up(self) -> float:
        """Always-valid p-value against "the mean is at most 0"."""
        return math.exp(-self.max_log_up)

    @property
    def p_down(self) -> float:
        """Always-valid p-value against "the mean is at least 0"."""
        return math.exp(-self.max_log_down)

    @property
    def mean(self) -> float | None:
        """The plain average of the differences so far (None before the first)."""
        return self._sum / self.count if self.count else None


class PairedDifference:
    """Candidate outcomes minus head averages of ``group`` outcomes, fed to a test."""

    __slots__ = ("_candidates", "_group_count", "_group_sum", "_heads", "group", "test")

    def __init__(self, group: int = 1) -> None:
        if group < 1:
            raise ValueError(f"group must be at least 1, not {group}")
        self.group = group
        self.test = BettingTest()
        self._group_sum = 0.0
        self._group_count = 0
        self._heads: deque[float] = deque(maxlen=PAIR_BACKLOG)
        self._candidates: deque[float] = deque(maxlen=PAIR_BACKLOG)

    def add_head(self, x: float) -> None:
        _check_outcome(x)
        self._group_sum += x
        self._group_count += 1
        if self._group_count == self.group:
            if self._candidates:  # the oldest waiting candidate outcome meets this group
                self.test.add(self._candidates.popleft() - self._group_sum / self.group)
            else:
                self._heads.append(self._group_sum / self.group)
            self._group_sum, self._group_count = 0.0, 0

    def snapshot(self) -> dict[str, object]:
        """The pairing's whole state, JSON-ready (see :meth:`BettingTest.snapshot`)."""
        return {
            "group": self.group,
            "test": self.test.snapshot(),
            "group_sum": self._group_sum,
            "group_count": self._group_count,
            "heads": list(self._heads),
            "candidates": list(self._candidates),
        }

    @classmethod
    def restored(cls, values: dict[str, Any]) -> PairedDifference:
        paired = cls(int(values["group"]))
        paired.test = BettingTest.restored(values["test"])
        paired._group_sum = float(values["group_sum"])
        paired._group_count = int(values["group_count"])
        paired._heads.extend(values["heads"])
        paired._candidates.extend(values["candidates"])
        return paired

    def add_candidate(self, x: float) -> None:
        _check_outcome(x)
        if self._heads:  # the oldest waiting head group meets this outcome
            self.test.add(x - self._heads.popleft())
        else:
            self._candidates.append(x)


def _check_outcome(x: float) -> None:
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"an outcome must lie in [0, 1], not {x}")
