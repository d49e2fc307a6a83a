"""A steady client load for fault tests: N chat completions per second, each followed by a
report that quotes its receipt, against one or more Reef replicas (fail-over).

The load is open-loop: a request is started every ``1/rate`` seconds whatever the
previous ones are doing (up to ``max_in_flight``), so a stall shows up as errors and
latency, not as a slower client. Every outcome is recorded with its wall-clock time:

* ``receipts``: every receipt a client got (200 + ``x-reef-agent-record-id``);
* ``reports``: every report acknowledged (200), by client-chosen id;
* ``errors``: counts by status (``"connect"``/``"timeout"``/... for transport errors);
* ``samples``: (time, ok, latency seconds) of every finished attempt.

With several targets, a request that fails on the transport (the replica is gone) or
with 5xx is retried on the next target, once per target; the target that failed is
skipped for ``cooldown`` seconds. A chat completion retried that way gets a fresh
receipt; a report keeps its id (an identical resend is a no-op in Reef).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

RECEIPT_HEADER = "x-reef-agent-record-id"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished request (after fail-over), as the client saw it."""

    kind: str  # "chat" or "report"
    started: float  # time.monotonic()
    ended: float
    status: str  # "200", "503", "connect", "timeout", ...

    @property
    def ok(self) -> bool:
        return self.status == "200"

    @property
    def latency(self) -> float:
        return self.ended - self.started


@dataclass
class LoadResult:
    """What the clients saw; safe to read while the load runs (take ``snapshot``)."""

    receipts: dict[str, str] = field(default_factory=dict)  # receipt -> scenario
    reports: dict[str, str] = field(default_factory=dict)  # report id -> scenario
    report_refs: dict[str, str] = field(default_factory=dict)  # report id -> receipt
    errors: Counter[str] = field(default_factory=Counter)
    attempts: list[Attempt] = field(default_factory=list)
    failovers: int = 0

    def acknowledged(self) -> int:
        return len(self.receipts) + len(self.reports)

    def between(self, start: float, end: float) -> list[Attempt]:
        return [a for a in self.attempts if start <= a.started < end]

    def offered_rate(self, start: float, end: float) -> float:
        """Requests started per second in [start, end)."""
        if end <= start:
            return 0.0
        return len(self.between(start, end)) / (end - start)

    def last_failure(self, after: float = 0.0, slow: float | None = None) -> float | None:
        """When the last failed attempt (or, with ``slow``, one slower than that many
        seconds) ended, among those started after ``after``; None if there is none."""
        ends = [
            a.ended
            for a in self.attempts
            if a.started >= after and (not a.ok or (slow is not None and a.latency > slow))
        ]
        return max(ends) if ends else None

    def first_ok_after(self, moment: float) -> float | None:
        """When the first attempt started after ``moment`` succeeded."""
        oks = [a.ended for a in self.attempts if a.ok and a.started >= moment]
        return min(oks) if oks else None

    def recovery_seconds(self, fault_at: float, slow: float | None = None) -> float:
        """Fault → the first success after the last failure (0 if nothing failed); with
        ``slow``, answers slower than that many seconds count as failures too."""
        last = self.last_failure(after=fault_at, slow=slow)
        if last is None:
            return 0.0
        first = self.first_ok_after(last)
        if first is None and slow is not None:
            # the window closed on a slow answer (nothing started after it ended): slow
            # answers are answers, so the load had recovered by then if no request failed
            # for good after the last success
            hard = self.last_failure(after=fault_at)
            if hard is None or self.first_ok_after(hard) is not None:
                return last - fault_at
        assert first is not None, "the load never succeeded again after the fault"
        return first - fault_at

    def recovered_after(self, moment: float) -> float:
        """Seconds from ``moment`` (the fault healed) to the first success after which no
        started request failed."""
        failed = [a for a in self.attempts if a.started >= moment and not a.ok]
        if not failed:
            first = self.first_ok_after(moment)
        else:
            # a success of a request started after the last failing one started; the load
            # may stop before such a request ends after the last failure ended (that one
            # can be the slowest), so a success ending after it counts too
            last_start = max(a.started for a in failed)
            last_end = max(a.ended for a in failed)
            oks = [
                a.ended
                for a in self.attempts
                if a.ok and (a.started > last_start or a.ended > last_end)
            ]
            first = min(oks) if oks else None
        assert first is not None, "the load never succeeded after the fault was healed"
        return max(0.0, first - moment)

    def latency_p99(self, start: float = 0.0, end: float = float("inf")) -> float:
        lat = sorted(a.latency for a in self.attempts if a.ok and start <= a.started < end)
        if not lat:
            return 0.0
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))]

    def summary(self) -> dict[str, Any]:
        return {
            "receipts": len(self.receipts),
            "reports": len(self.reports),
            "errors": dict(self.errors),
            "attempts": len(self.attempts),
            "failovers": self.failovers,
            "p99_s": round(self.latency_p99(), 3),
        }


class SteadyLoad:
    """Background thread: ``rate`` chat completions per second (+ a report on each receipt).

    Use as a context manager (``with SteadyLoad(...) as load:``) or ``start``/``stop``.
    ``targets`` are base URLs of Reef replicas; ``scenarios`` are used round-robin.
    """

    def __init__(
        self,
        targets: Sequence[str],
        token: str,
        scenarios: Sequence[str],
        *,
        rate: float = 10.0,
        report: bool = True,
        timeout: float = 20.0,
        max_in_flight: int = 256,
        cooldown: float = 2.0,
        prompt_bytes: int = 0,
        max_tokens: int | None = None,
    ) -> None:
        assert targets and scenarios
        self.targets = list(targets)
        self.token = token
        self.scenarios = list(scenarios)
        self.rate = rate
        self.report = report
        self.timeout = timeout
        self.max_in_flight = max_in_flight
        self.cooldown = cooldown
        self.prompt_bytes = prompt_bytes
        self.max_tokens = max_tokens
        self.result = LoadResult()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_until: dict[str, float] = {}
        self._sent = 0
        self.started_at = 0.0
        self.stopped_at = 0.0

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> SteadyLoad:
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._main, name="steady-load", daemon=True)
        self._thread.start()
        return self

    def stop(self, drain: float = 60.0) -> LoadResult:
        """Stop starting requests; wait for those in flight (up to ``drain`` s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(drain + 5.0)
            assert not self._thread.is_alive(), "the load generator did not stop"
        self.stopped_at = time.monotonic()
        return self.result

    def __enter__(self) -> SteadyLoad:
        return self.start()

    def __exit__(self, *_: object) -> None:
        if not self._stop.is_set():
            self.stop()

    def snapshot(self) -> LoadResult:
        with self._lock:
            return LoadResult(
                dict(self.result.receipts),
                dict(self.result.reports),
                dict(self.result.report_refs),
                Counter(self.result.errors),
                list(self.result.attempts),
                self.result.failovers,
            )

    def wait_acks(self, count: int, timeout: float = 60.0, since: float = 0.0) -> None:
        """Until ``count`` successful chat completions started after ``since``."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                done = sum(
                    1
                    for a in self.result.attempts
                    if a.ok and a.kind == "chat" and a.started >= since
                )
            if done >= count:
                return
            assert time.monotonic() < deadline, (
                f"only {done} of {count} acknowledged requests in {timeout:.0f}s: "
                f"{self.result.summary()}"
            )
            time.sleep(0.1)

    # -- the loop ----------------------------------------------------------------

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=16)
        headers = {"Authorization": f"Bearer {self.token}"}
        timeout = httpx.Timeout(self.timeout, connect=min(5.0, self.timeout))
        async with httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits) as client:
            gate = asyncio.Semaphore(self.max_in_flight)
            tasks: set[asyncio.Task[None]] = set()
            interval = 1.0 / self.rate
            next_at = time.monotonic()
            while not self._stop.is_set():
                now = time.monotonic()
                if now < next_at:
                    await asyncio.sleep(min(next_at - now, 0.05))
                    continue
                next_at += interval
                if next_at < now - 1.0:  # fell far behind (a stalled loop): do not burst
                    next_at = now
                if gate.locked():
                    self._record(Attempt("chat", now, now, "overload"))
                    continue
                task = asyncio.create_task(self._one(client, gate))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks, timeout=self.timeout * (len(self.targets) + 1) * 2)

    async def _one(self, client: httpx.AsyncClient, gate: asyncio.Semaphore) -> None:
        async with gate:
            self._sent += 1
            scenario = self.scenarios[self._sent % len(self.scenarios)]
            text = f"load {uuid.uuid4().hex}"
            if self.prompt_bytes:
                text += " " + "x" * self.prompt_bytes
            body: dict[str, Any] = {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": text}],
            }
            if self.max_tokens is not None:
                body["max_tokens"] = self.max_tokens
            started = time.monotonic()
            status, response = await self._post(client, "/v1/chat/completions", body, scenario)
            self._record(Attempt("chat", started, time.monotonic(), status))
            if response is None or status != "200":
                return
            receipt = response.headers.get(RECEIPT_HEADER)
            assert receipt, f"200 without a receipt: {response.headers}"
            with self._lock:
                self.result.receipts[receipt] = scenario
            if not self.report or self._stop.is_set():
                return
            report_id = f"rep-{uuid.uuid4().hex}"
            report = {
                "agent_record_id": report_id,
                "score": 1.0,
                "feedback": {"correction": "fine"},
                "references": [receipt],
            }
            started = time.monotonic()
            status, _ = await self._post(client, "/reef/report", report, scenario)
            self._record(Attempt("report", started, time.monotonic(), status))
            if status == "200":
                with self._lock:
                    self.result.reports[report_id] = scenario
                    self.result.report_refs[report_id] = receipt

    async def _post(
        self, client: httpx.AsyncClient, path: str, body: dict[str, Any], scenario: str
    ) -> tuple[str, httpx.Response | None]:
        """POST on the first live target, failing over on transport errors and 5xx."""
        order = self._targets_in_order()
        status = "no_target"
        response: httpx.Response | None = None
        for i, base in enumerate(order):
            if i:
                with self._lock:
                    self.result.failovers += 1
            try:
                response = await client.post(
                    base + path, json=body, headers={"x-reef-scenario": scenario}
                )
            except httpx.TimeoutException:
                status, response = "timeout", None
            except httpx.TransportError as exc:
                status, response = type(exc).__name__, None
            else:
                status = str(response.status_code)
                if response.status_code < 500:
                    return status, response
            self._down_until[base] = time.monotonic() + self.cooldown
        return status, response

    def _targets_in_order(self) -> list[str]:
        now = time.monotonic()
        up = [t for t in self.targets if self._down_until.get(t, 0.0) <= now]
        down = [t for t in self.targets if t not in up]
        if len(up) > 1:  # spread the load over the live replicas
            shift = self._sent % len(up)
            up = up[shift:] + up[:shift]
        return up + down

    def _record(self, attempt: Attempt) -> None:
        with self._lock:
            self.result.attempts.append(attempt)
            if not attempt.ok:
                self.result.errors[f"{attempt.kind}:{attempt.status}"] += 1
