"""Prometheus metrics of one API process, in a registry owned by the app (no globals).

Request, upstream and log-append latencies are observed where they happen; counts that
are facts of the log (report fates, candidates, engine loads, completed turns, expired
sessions, judgements, rollouts, tokens and cost, processor lag) are read from the
projections at scrape time, so every replica reports the same totals; an active
rollout's live figures are the rollout controller's, read in the background.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastapi import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reef.api.dialects import dialect_of_path
from reef.core.events import utc_now
from reef.core.rollout_control import live_figures
from reef.core.rollouts import RolloutBook
from reef.services.projection import DECISIONS, TurnFigures

if TYPE_CHECKING:
    from reef.api.context import AppContext

_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_ROUTES = (
    "/v1/chat/completions",
    "/v1/messages/count_tokens",
    "/v1/messages",
    "/v1/responses",
    "/v1/models",
    "/reef/report",
    "/reef/reports",
    "/reef/scenarios",
    "/reef/harness",
    "/reef/lfs",
    "/reef/status",
    "/healthz",
    "/metrics",
)


def route_label(path: str) -> str:
    """A bounded label: the route family, never the raw path (ids would explode it)."""
    return next((route for route in _ROUTES if path.startswith(route)), "other")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "reef_requests",
            "HTTP requests answered.",
            ["route", "dialect", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "reef_request_seconds",
            "Time to answer a request.",
            ["route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.upstream_seconds = Histogram(
            "reef_upstream_seconds",
            "Upstream response time.",
            ["route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.append_seconds = Histogram(
            "reef_log_append_seconds",
            "Time for the log to acknowledge an append.",
            buckets=_BUCKETS,
            registry=self.registry,
        )

    def bind(self, ctx: AppContext) -> None:
        self.registry.register(_LogCollector(ctx))

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """A pure ASGI wrapper (no BaseHTTPMiddleware: it costs a task per request)."""

        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500

            async def observe(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await app(scope, receive, observe)
            finally:
                path = scope["path"]
                route = route_label(path)
                self.request_seconds.labels(route).observe(time.perf_counter() - started)
                self.requests.labels(route, dialect_of_path(path).value, str(status)).inc()

        return wrapped

    def exposition(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class _LogCollector(Collector):
    """Totals folded from the log by this replica's projection, and processor lag."""

    def __init__(self, ctx: AppContext) -> None:
        self._ctx = ctx

    def collect(self) -> Iterator[Metric]:
        state = self._ctx.projection.state
        fates = CounterMetricFamily("reef_report_fates", "Reports by fate.", labels=["status"])
        counts: dict[str, int] = {}
        for fate in state.fates.values():
            counts[fate.status] = counts.get(fate.status, 0) + 1
        for status, count in sorted(counts.items()):
            fates.add_metric([status], count)
        yield fates
        pending = GaugeMetricFamily("reef_samples_pending", "Joined samples not yet trained on.")
        pending.add_metric([], state.samples_pending())
        yield pending
        candidates = CounterMetricFamily(
            "reef_candidates", "Release proposals by decision.", labels=["outcome"]
        )
        for outcome, count in sorted(state.candidates.items()):
            candidates.add_metric([outcome], count)
        yield candidates
        loads = CounterMetricFamily(
            "reef_engine_loads", "Engine loads by outcome.", labels=["outcome"]
        )
        for outcome, count in sorted(state.engine_loads.items()):
            loads.add_metric([outcome], count)
        yield loads
        yield from self._turns()
        yield from self._rollouts()
        yield from _spend(self._ctx)
        yield from _request_reads(self._ctx)
        lag = GaugeMetricFamily(
            "reef_processor_lag", "Input records not yet processed.", labels=["processor", "topic"]
        )
        for name, topics in sorted(self._ctx.processors.lag.items()):
            for topic, value in sorted(topics.items()):
                lag.add_metric([name, topic], value)
        yield lag

    def _rollouts(self) -> Iterator[Metric]:
        """Rollouts by status (folded from the log), and each active rollout's live
        figures, labelled by scenario: one series per scenario with an active rollout (an
        admin starts each), gone when it ends."""
        book = self._ctx.projection.state.rollouts
        statuses: dict[str, int] = {}
        for view in book.scenarios.values():
            for rollout in view.rollouts:
                statuses[rollout.status] = statuses.get(rollout.status, 0) + 1
        if not statuses and not self._ctx.settings.deployment.rollouts:
            return
        counts = CounterMetricFamily("reef_rollouts", "Rollouts by status.", labels=["status"])
        for status in ROLLOUT_STATUSES:
            counts.add_metric([status], statuses.get(status, 0))
        yield counts
        yield from _shadow_copies(self._ctx)
        yield from _live_rollouts(self._ctx, book)

    def _turns(self) -> Iterator[Metric]:
        """Sessions and judgements, while sessions are tracked (or the log holds some)."""
        figures = self._ctx.projection.state.turns
        if not figures and not self._ctx.settings.sessions.track:
            return
        totals = TurnFigures.total(figures.values())
        completed = CounterMetricFamily(
            "reef_turns_completed", "Agent turns bound to their next state."
        )
        completed.add_metric([], totals.completed)
        yield completed
        expired = CounterMetricFamily(
            "reef_sessions_expired", "Sessions ended without a next state for their last turn."
        )
        expired.add_metric([], totals.expired)
        yield expired
        judged = CounterMetricFamily(
            "reef_turns_judged", "Completed turns judged, by decision.", labels=["decision"]
        )
        for decision in DECISIONS:
            judged.add_metric([decision], totals.judged.get(decision, 0))
        yield judged
        failed = CounterMetricFamily(
            "reef_judgements_failed", "Completed turns the judge could not judge."
        )
        failed.add_metric([], totals.failed)
        yield failed
        if self._ctx.judge is not None:
            in_flight = GaugeMetricFamily(
                "reef_judge_in_flight", "Turns this process's judge is judging now."
            )
            in_flight.add_metric([], self._ctx.judge.status()["in_flight"])
            yield in_flight


def _spend(ctx: AppContext) -> Iterator[Metric]:
    """Tokens and cost per scenario and release that served, folded from the log while a
    price table is set: one series per release that answered (docs/cost.md)."""
    if not ctx.settings.recording.prices:
        return
    cost = CounterMetricFamily(
        "reef_cost_usd",
        "USD the recorded exchanges cost under the price table.",
        labels=["scenario", "release"],
    )
    tokens = CounterMetricFamily(
        "reef_tokens",
        "Tokens the recorded exchanges used, by kind.",
        labels=["scenario", "release", "kind"],
    )
    unpriced = CounterMetricFamily(
        "reef_exchanges_unpriced",
        "Recorded exchanges without a cost (model not in the table, or no usage).",
        labels=["scenario", "release"],
    )
    ledger = ctx.projection.state.spend
    for scenario in sorted(ledger.scenarios):
        for release, spend in ledger.by_release(scenario).items():
            cost.add_metric([scenario, release], spend.cost_usd)
            unpriced.add_metric([scenario, release], spend.exchanges - spend.priced)
            for kind, count in spend.tokens().items():
                tokens.add_metric([scenario, release, kind], count)
    yield cost
    yield tokens
    yield unpriced


#: a rollout's statuses, as counted in ``reef_rollouts``
ROLLOUT_STATUSES = ("active", "promoted", "rolled_back", "superseded")


def _request_reads(ctx: AppContext) -> Iterator[Metric]:
    """How this process read the request bodies it relayed (reef.api.rereading)."""
    recent = ctx.requests
    reads = CounterMetricFamily(
        "reef_request_reads",
        "Relayed request bodies by how this process read them: by what is new since the "
        "session's latest request, or whole.",
        labels=["read"],
    )
    reads.add_metric(["new"], recent.reread)
    reads.add_metric(["whole"], recent.parsed)
    yield reads
    held = GaugeMetricFamily(
        "reef_request_layouts_bytes",
        "Bytes of sessions' latest requests this process holds to read their next ones by.",
    )
    held.add_metric([], recent.held)
    yield held


def _shadow_copies(ctx: AppContext) -> Iterator[Metric]:
    """This process's shadow copies (reef.api.shadow): sent, dropped for want of room,
    and in flight now."""
    copies = CounterMetricFamily(
        "reef_shadow_copies", "Shadow copies this process sent or dropped.", labels=["outcome"]
    )
    copies.add_metric(["sent"], ctx.shadows.sent)
    copies.add_metric(["dropped"], ctx.shadows.dropped)
    yield copies
    in_flight = GaugeMetricFamily(
        "reef_shadow_copies_in_flight", "Shadow copies this process is waiting for now."
    )
    in_flight.add_metric([], ctx.shadows.in_flight)
    yield in_flight


def _live_rollouts(ctx: AppContext, book: RolloutBook) -> Iterator[Metric]:
    share = GaugeMetricFamily(
        "reef_rollout_share", "The candidate's share of an active rollout.", labels=["scenario"]
    )
    mode = GaugeMetricFamily(
        "reef_rollout_mode", "An active rollout's mode (1).", labels=["scenario", "mode"]
    )
    per_arm = {
        name: GaugeMetricFamily(f"reef_rollout_{name}", doc, labels=["scenario", "arm"])
        for name, doc in (
            ("exchanges", "Exchanges each arm of an active rollout served."),
            ("errors", "Exchanges each arm of an active rollout failed."),
            ("scores", "Scored exchanges of each arm of an active rollout."),
            ("mean_score", "Mean score (on [0, 1]) of each arm of an active rollout."),
        )
    }
    p_values = {
        name: GaugeMetricFamily(f"reef_rollout_{name}", doc, labels=["scenario"])
        for name, doc in (
            ("p_better", "Always-valid p-value against 'the candidate is no better'."),
            ("p_worse", "Always-valid p-value against 'the candidate is no worse'."),
        )
    }
    now = utc_now()
    for scenario, live in sorted(ctx.processors.live_rollouts.items()):
        view = book.scenario(scenario)
        active = None if view is None else view.active
        if active is None or active.rollout_id != live["rollout_id"]:
            continue
        figures = live_figures(live, now)
        share.add_metric([scenario], active.policy.share)
        mode.add_metric([scenario, active.policy.mode], 1)
        for arm in ("head", "candidate"):
            for name, family in per_arm.items():
                value = figures[arm][name]
                if value is not None:
                    family.add_metric([scenario, arm], value)
        for name, family in p_values.items():
            family.add_metric([scenario], figures[name])
    yield share
    yield mode
    yield from per_arm.values()
    yield from p_values.values()
