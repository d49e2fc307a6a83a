"""What one exchange's tokens cost: provider usage normalised, priced by a table.

The providers count a prompt differently when part of it comes from their prompt cache:

* Anthropic (``/v1/messages``) reports ``input_tokens`` *without* the cached part:
  ``cache_read_input_tokens`` (read from the cache) and ``cache_creation_input_tokens``
  (written to it) come on top, each billed at its own rate; of the writes, those to the
  one-hour cache (``cache_creation.ephemeral_1h_input_tokens``) at a higher one.
* OpenAI (``/v1/chat/completions``: ``prompt_tokens``; ``/v1/responses``:
  ``input_tokens``) reports every prompt token, the cached ones (``cached_tokens`` in the
  details) *included*; it bills no cache write.

:class:`Usage` keeps what the provider said and which way it counts, and
:meth:`Usage.billable` splits the prompt into uncached, cache-read and cache-write tokens
the same way for both. A price table names, per model, USD per million tokens of each
kind; :func:`exchange_cost` prices one exchange. It never guesses: an unknown model, a
missing count, or tokens of a kind the model's entry has no price for give ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from reef.core.events import InferenceRecorded

PER_TOKENS = 1_000_000


class Price(Protocol):
    """One model's prices in USD per million tokens (None: no price for that kind)."""

    @property
    def input(self) -> float: ...

    @property
    def cached_input(self) -> float | None: ...

    @property
    def cache_write(self) -> float | None: ...

    @property
    def cache_write_1h(self) -> float | None: ...

    @property
    def output(self) -> float: ...


PriceTable = Mapping[str, Price]


@dataclass(frozen=True, slots=True)
class Billable:
    """An exchange's tokens by rate: every prompt token is in exactly one of the first three."""

    uncached_input: int
    cache_read: int
    cache_write: int
    output: int
    #: of ``cache_write``, the writes to a one-hour cache (Anthropic's longer TTL)
    cache_write_1h: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the provider reported them (None: not reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    #: whether ``input_tokens`` counts the cache reads (OpenAI) or leaves them out (Anthropic)
    input_includes_cached: bool = False
    #: of ``cache_write_tokens``, those written to a one-hour cache (None: not reported)
    cache_write_1h_tokens: int | None = None

    @classmethod
    def recorded(
        cls,
        dialect: str,
        input_tokens: int | None,
        output_tokens: int | None,
        cache_read_tokens: int | None,
        cache_write_tokens: int | None,
    ) -> Usage:
        """The usage of a record, whose dialect tells how its ``input_tokens`` counts."""
        return cls(
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            input_includes_cached=dialect != "anthropic",
        )

    def billable(self) -> Billable | None:
        """The counts by rate; None without both an input and an output count."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        read = self.cache_read_tokens or 0
        write = self.cache_write_tokens or 0
        uncached = self.input_tokens - read if self.input_includes_cached else self.input_tokens
        long_writes = min(self.cache_write_1h_tokens or 0, write)
        return Billable(max(uncached, 0), read, write, self.output_tokens, long_writes)


NO_USAGE = Usage()


def exchange_cost(model: str | None, usage: Usage, prices: PriceTable | None) -> float | None:
    """USD one exchange cost under ``prices``; None when it cannot be known exactly."""
    if model is None or not prices:
        return None
    price = prices.get(model)
    counts = usage.billable()
    if price is None or counts is None:
        return None
    total = counts.uncached_input * price.input + counts.output * price.output
    for tokens, rate in (
        (counts.cache_read, price.cached_input),
        (counts.cache_write - counts.cache_write_1h, price.cache_write),
        (counts.cache_write_1h, price.cache_write_1h),
    ):
        if tokens:
            if rate is None:
                return None
            total += tokens * rate
    return total / PER_TOKENS


@dataclass(slots=True)
class Spend:
    """Exchanges, tokens by rate and their cost, summed over some records."""

    exchanges: int = 0
    #: exchanges whose usage was reported, and those of them a price was known for
    metered: int = 0
    priced: int = 0
    uncached_input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, event: InferenceRecorded) -> None:
        self.exchanges += 1
        counts = recorded_usage(event).billable()
        if counts is None:
            return
        self.metered += 1
        self.uncached_input_tokens += counts.uncached_input
        self.cache_read_tokens += counts.cache_read
        self.cache_write_tokens += counts.cache_write
        self.output_tokens += counts.output
        if event.cost_usd is not None:
            self.priced += 1
            self.cost_usd += event.cost_usd

    def tokens(self) -> dict[str, int]:
        """Tokens by the kind each is billed as."""
        return {
            "uncached_input": self.uncached_input_tokens,
            "cache_read": self.cache_read_tokens,
            "cache_write": self.cache_write_tokens,
            "output": self.output_tokens,
        }

    def as_json(self) -> dict[str, int | float]:
        return {
            "exchanges": self.exchanges,
            "metered": self.metered,
            "priced": self.priced,
            "uncached_input_tokens": self.uncached_input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
        }


class SpendLedger:
    """Spend per scenario and per release that answered, folded from recorded exchanges.

    A record counts under the release that served it (``served_release_id``, else the
    frozen ``release_id``); shadow copies count too: the provider bills them. The fold
    keeps no ids, so it counts each record once as the log holds it.
    """

    def __init__(self) -> None:
        #: scenario -> release -> its spend
        self.scenarios: dict[str, dict[str, Spend]] = {}

    def apply(self, event: InferenceRecorded) -> None:
        release = event.served_release_id or event.release_id
        self.scenarios.setdefault(event.scenario, {}).setdefault(release, Spend()).add(event)

    def scenario(self, name: str) -> Spend:
        """The scenario's total over its releases."""
        total = Spend()
        for spend in self.scenarios.get(name, {}).values():
            _merge(total, spend)
        return total

    def by_release(self, name: str) -> dict[str, Spend]:
        return dict(sorted(self.scenarios.get(name, {}).items()))


def _merge(into: Spend, spend: Spend) -> None:
    into.exchanges += spend.exchanges
    into.metered += spend.metered
    into.priced += spend.priced
    into.uncached_input_tokens += spend.uncached_input_tokens
    into.cache_read_tokens += spend.cache_read_tokens
    into.cache_write_tokens += spend.cache_write_tokens
    into.output_tokens += spend.output_tokens
    into.cost_usd += spend.cost_usd


def recorded_usage(event: InferenceRecorded) -> Usage:
    """The usage a record holds, counted the way its dialect counts."""
    return Usage.recorded(
        event.dialect,
        event.input_tokens,
        event.output_tokens,
        event.cache_read_input_tokens,
        event.cache_creation_input_tokens,
    )
