"""Token-bucket rate limits on ``POST /reef/report``: per token and per scenario (pure core).

Threat: feedback poisoning by volume. One token (a leaked key, a buggy or hostile
client) or many tokens aimed at one scenario can flood reports and so dominate what the
scenario trains on, and fill the log. Each key (the token's principal name, the
scenario name) has a bucket of ``burst`` reports that refills at ``per_second``; a
report takes one from *both* of its buckets or from neither, so a refused report costs
nothing and the caller is told when to retry (the longer of the two waits).

The clock is injected (seconds, monotonic), so the rules are tested without sleeping.
A full bucket is the same as no bucket, so full ones are forgotten when the table grows:
memory stays bounded by the keys active within the last ``burst / per_second`` seconds.

Limits are kept in memory, per API replica: with N stateless replicas behind a load
balancer a key gets up to N times the configured rate (configure ``rate / N``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from reef.settings import ReportLimits

Clock = Callable[[], float]
Limit = Literal["token", "scenario"]
#: sweep for full buckets once a table holds this many keys (then at twice the survivors)
SWEEP_AT = 4096


@dataclass(frozen=True, slots=True)
class Rate:
    """``burst`` reports at once, refilled at ``per_second``."""

    per_second: float
    burst: float

    def __post_init__(self) -> None:
        if not (self.per_second > 0 and math.isfinite(self.per_second)):
            raise ValueError(f"rate must be a positive number, not {self.per_second!r}")
        if not (self.burst >= 1 and math.isfinite(self.burst)):
            raise ValueError(f"burst must be at least 1, not {self.burst!r}")


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    """One bucket per key, all with the same :class:`Rate`."""

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self._buckets: dict[str, _Bucket] = {}
        self._sweep_at = SWEEP_AT

    def __len__(self) -> int:
        return len(self._buckets)

    def level(self, key: str, now: float) -> float:
        """Reports ``key`` may send at ``now`` (fractional)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return self.rate.burst
        elapsed = max(0.0, now - bucket.at)  # a clock that steps back refills nothing
        return min(self.rate.burst, bucket.tokens + elapsed * self.rate.per_second)

    def wait(self, key: str, now: float) -> float:
        """Seconds until ``key`` may send one report (0: now)."""
        missing = 1.0 - self.level(key, now)
        return 0.0 if missing <= 0 else missing / self.rate.per_second

    def take(self, key: str, now: float) -> None:
        """Spend one report of ``key`` (call only when :meth:`wait` is 0)."""
        level = self.level(key, now)
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = _Bucket(level - 1.0, now)
        else:
            bucket.tokens, bucket.at = level - 1.0, max(now, bucket.at)
        if len(self._buckets) >= self._sweep_at:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        full = [k for k in self._buckets if self.level(k, now) >= self.rate.burst]
        for key in full:
            del self._buckets[key]
        self._sweep_at = max(SWEEP_AT, 2 * len(self._buckets))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a report was refused and how long until it may be sent again."""

    limit: Limit
    retry_after_s: float

    @property
    def retry_after_header(self) -> str:
        """``Retry-After`` in whole seconds, rounded up, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))


class ReportLimiter:
    """Admits a report when both its token's and its scenario's bucket allow it."""

    def __init__(
        self,
        per_token: Rate | None,
        per_scenario: Rate | None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._tables: list[tuple[Limit, TokenBuckets]] = []
        if per_token is not None:
            self._tables.append(("token", TokenBuckets(per_token)))
        if per_scenario is not None:
            self._tables.append(("scenario", TokenBuckets(per_scenario)))
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return bool(self._tables)

    def admit(self, principal: str, scenario: str) -> Refusal | None:
        """None (and one report spent from each bucket), or the refusal (nothing spent)."""
        if not self._tables:
            return None
        now = self._clock()
        keys = {"token": principal, "scenario": scenario}
        waits = [(table.wait(keys[limit], now), limit) for limit, table in self._tables]
        longest, limit = max(waits)
        if longest > 0:
            return Refusal(limit, longest)
        for name, table in self._tables:
            table.take(keys[name], now)
        return None


def limiter_from(limits: ReportLimits, clock: Clock = time.monotonic) -> ReportLimiter:
    """The report limiter the settings ask for (no limit where a rate is unset)."""
    per_token = (
        Rate(limits.rate_per_token, limits.burst_per_token)
        if limits.rate_per_token is not None
        else None
    )
    per_scenario = (
        Rate(limits.rate_per_scenario, limits.burst_per_scenario)
        if limits.rate_per_scenario is not None
        else None
    )
    return ReportLimiter(per_token, per_scenario, clock)
