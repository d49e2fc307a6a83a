"""Liveness of a stream worker: input that waits but does not move ends the worker.

A worker that makes no progress is worse than a dead one: a supervisor restarts a dead
worker, and exactly-once is built for that path (the open transactions are aborted, the
stores come back from their committed changelog). The Faust host this replaced was seen
wedged that way (alive, Ready, input waiting, nothing committed); Reef's own host
(:mod:`streams.host`) has no known path to it, and this stays as the last line of defence.

:class:`ProgressWatch` is the pure rule: an input partition of this worker is *stalled*
when its end offset is past the group's committed offset and that committed offset did
not move for ``stall_s`` (records can be fetched and still wait, so the consumer's fetch
position is not the measure). :func:`watch` runs it as a task of the host's loop, asking
the brokers (not the consumer that may be stuck) for both offsets, and on a stall exits
with status 75 through the ``die`` it is given. Rebalances and restores reset the clock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

from streams.kafka_consumer import BrokerOffsets
from streams.records import TopicPartition as TP

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stall:
    partition: TP
    committed: int
    end: int
    seconds: float

    def describe(self) -> str:
        return (
            f"{self.partition.topic}[{self.partition.partition}]: {self.end - self.committed} "
            f"records wait after offset {self.committed}, nothing committed for "
            f"{self.seconds:.0f} s"
        )


@dataclass
class ProgressWatch:
    """Which partitions stalled: records wait, yet the committed offset stood ``stall_s``."""

    stall_s: float
    _since: dict[TP, tuple[int, float]] = field(default_factory=dict)
    _last_look: float | None = None

    def reset(self) -> None:
        self._since.clear()
        self._last_look = None

    def observe(
        self, now: float, committed: Mapping[TP, int], ends: Mapping[TP, int]
    ) -> list[Stall]:
        """One look at the worker's partitions (a partition missing from ``ends``: unknown).

        Looks further apart than half the stall time mean this process itself did not run
        (suspended, starved): that time is not held against the partitions."""
        if self._last_look is not None and now - self._last_look > self.stall_s / 2:
            self._since.clear()
        self._last_look = now
        stalls = []
        for tp, done in committed.items():
            end = ends.get(tp)
            if end is None or done >= end:
                self._since.pop(tp, None)
                continue
            seen = self._since.get(tp)
            if seen is None or seen[0] != done:
                self._since[tp] = (done, now)
            elif now - seen[1] >= self.stall_s:
                stalls.append(Stall(tp, done, end, now - seen[1]))
        for tp in set(self._since) - set(committed):
            del self._since[tp]
        return stalls


class WatchedHost(Protocol):
    """What the watchdog reads of a host (:class:`streams.host.StreamsHost`)."""

    @property
    def group(self) -> str: ...
    @property
    def rebalancing(self) -> bool: ...
    @property
    def restoring(self) -> bool: ...
    def input_assignment(self) -> set[TP]: ...


async def watch(
    host: WatchedHost,
    bootstrap: str,
    stall_s: float,
    die: Callable[[str, BaseException | None], NoReturn],
) -> None:
    """Look at the host every ``stall_s / 4`` seconds (at most 5 s apart); exit on a stall.

    Two more ways of standing still end the worker too: a rebalance that does not finish
    in ``4 * stall_s`` (restoring stores aside), and an event loop that stops running the
    looks (a thread of its own checks that one: a blocked loop cannot notice itself)."""
    progress = ProgressWatch(stall_s)
    offsets = BrokerOffsets(bootstrap, host.group, answer_within_s=stall_s)
    interval = min(5.0, max(0.5, stall_s / 4))
    rebalancing_since: float | None = None
    last_look = [time.monotonic()]
    # a look takes at most ~2 x stall_s (committed, then end offsets, each bounded)
    limit = interval + 3 * stall_s

    def guard() -> None:
        while True:
            time.sleep(1.0)
            if time.monotonic() - last_look[0] > limit:
                die(f"no progress: the worker's event loop ran no check for {limit:.0f} s", None)

    threading.Thread(target=guard, name="reef-watchdog-guard", daemon=True).start()
    logger.info(
        "watchdog: input that waits %.0f s with nothing committed ends the worker (75)", stall_s
    )
    try:
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            last_look[0] = now
            if host.rebalancing:
                progress.reset()
                if host.restoring:  # restoring a large changelog may take long: no stall
                    rebalancing_since = None
                elif rebalancing_since is None:
                    rebalancing_since = now
                elif now - rebalancing_since > 4 * stall_s:
                    die(
                        f"no progress: a rebalance has not finished in "
                        f"{now - rebalancing_since:.0f} s",
                        None,
                    )
                continue
            rebalancing_since = None
            tps = sorted(host.input_assignment())
            committed, ends = await offsets.of(tps) if tps else ({}, {})
            stalls = progress.observe(time.monotonic(), committed, ends)
            if stalls:
                die("no progress: " + "; ".join(stall.describe() for stall in stalls), None)
            last_look[0] = time.monotonic()
    finally:
        await offsets.close()
