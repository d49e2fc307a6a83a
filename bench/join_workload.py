"""The workload of bench/join_throughput.py and its result rows.

One workload for every row (:func:`workload`, encoded once by :func:`encode`) over
scenario names Kafka's partitioner spreads evenly; a :class:`Row` per measurement,
collected with the notes and figures in a :class:`Bench`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event
from reef.log.base import PendingAppend
from reef.log.partitioner import partition_for
from reef_dev.events import inference, receipt, report

PARTITIONS = 6
#: the original names: murmur2 puts them on partitions 0-5 as 2, 5, 1, 0, 1, 3 scenarios
LEGACY_SCENARIOS = tuple(f"bench-{i}" for i in range(12))


def balanced_scenarios(count: int = 12, partitions: int = PARTITIONS) -> tuple[str, ...]:
    """``count`` names ``bench-<i>`` that Kafka's partitioner spreads evenly (2 each)."""
    per = count // partitions
    taken: Counter[int] = Counter()
    names: list[str] = []
    for i in itertools.count():
        name = f"bench-{i}"
        partition = partition_for(name.encode(), partitions)
        if taken[partition] < per:
            taken[partition] += 1
            names.append(name)
            if len(names) == count:
                return tuple(names)
    raise AssertionError("unreachable")


SCENARIOS = balanced_scenarios()
REPO_ROOT = Path(__file__).resolve().parents[1]

# the targets of the issue
KAFKA_REPORTS_TARGET = 5_000
KAFKA_EVENTS_TARGET = 10_000
EMBEDDED_REPORTS_TARGET = 20_000
REPLAY_EVENTS_TARGET = 50_000


# -- the workload ------------------------------------------------------------------------


def workload(reports: int, scenarios: Sequence[str] = SCENARIOS) -> list[Event]:
    """M exchanges and M reports (report i quotes exchange i), exchanges first."""
    at = datetime.now(UTC).replace(microsecond=0)
    exchanges: list[Event] = []
    feedback: list[Event] = []
    for i in range(reports):
        scenario = scenarios[i % len(scenarios)]
        rec = receipt(scenario, i)
        question = f"question {i}: summarise the refund policy for order {i * 7919} " * 6
        answer = f"answer {i}: refunds within 30 days with the receipt; " * 6
        request = {"model": "m", "messages": [{"role": "user", "content": question}]}
        response = {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
        exchanges.append(
            inference(
                scenario,
                rec,
                at,
                release="rel-1",
                request=request,
                response=response,
                producer="bench",
                latency_ms=12.0,
                upstream_latency_ms=10.0,
            )
        )
        feedback.append(report(scenario, f"report-{i}", [rec], at, producer="bench"))
    return exchanges + feedback


def encode(events: Sequence[Event]) -> list[PendingAppend]:
    """The records ``EventStore.append_all`` writes for ``events`` (no keys, no claims)."""
    codec = EventCodec()
    out = []
    for event in events:
        value, headers = codec.encode(event)
        out.append(
            PendingAppend(
                topics.topic_for(event.type_name()), event.scenario.encode(), value, headers
            )
        )
    return out


@dataclass
class Row:
    name: str
    reports: int
    events: int
    seconds: float
    measured: str
    target: str = ""
    ok: bool | None = None
    note: str = ""
    #: CPU seconds the measured process(es) used over the same span (contention-proof)
    cpu: float | None = None

    @property
    def reports_per_cpu_s(self) -> float | None:
        return self.reports / self.cpu if self.cpu else None

    @property
    def reports_per_s(self) -> float:
        return self.reports / self.seconds if self.seconds > 0 else 0.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Bench:
    reports: int
    bootstrap: str = ""
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    code: str = ""
    failed: bool = False

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        print(
            f"  -> {row.name}: {row.reports_per_s:,.0f} reports/s, "
            f"{row.events_per_s:,.0f} events/s ({row.seconds:.2f} s, {row.measured})",
            flush=True,
        )
        return row


def outcome_note(kinds: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
