"""The log of bench/streams_chaos.py against its clients: :class:`Ledger`.

It reads the log incrementally and checks what the clients were told against it (every
acknowledged receipt and report on the log, one fate per report, no sample twice).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos_monitor import Observation
from reef.core import topics
from reef.core.events import InferenceRecorded, ReportRejected, ReportSubmitted, SampleJoined
from reef.log.kafka import KafkaLog
from reef.services.eventstore import EventStore
from reef_dev.load import LoadResult
from reef_dev.stack import process as stack_process

# ---------------------------------------------------------------------------
# The log against the clients


@dataclass
class CheckResult:
    lost_receipts: list[str] = field(default_factory=list)
    lost_reports: list[str] = field(default_factory=list)
    #: reports below the cut (the group committed past them) with no fate yet
    without_fate: list[str] = field(default_factory=list)
    several_fates: dict[str, int] = field(default_factory=dict)
    rejected_acknowledged: dict[str, str] = field(default_factory=dict)
    duplicate_sample_ids: int = 0
    receipts_in_two_samples: int = 0
    undecodable: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return len(self.lost_receipts) + len(self.lost_reports)

    @property
    def duplicated(self) -> int:
        return self.duplicate_sample_ids + self.receipts_in_two_samples + len(self.several_fates)

    def problems(self) -> list[str]:
        out = []
        if self.lost_receipts:
            shown = self.lost_receipts[:5]
            out.append(f"{len(self.lost_receipts)} receipts not in the log: {shown}")
        if self.lost_reports:
            out.append(f"{len(self.lost_reports)} reports not in the log: {self.lost_reports[:5]}")
        if self.without_fate:
            out.append(f"{len(self.without_fate)} reports without a fate: {self.without_fate[:5]}")
        if self.several_fates:
            out.append(f"reports with several fates: {list(self.several_fates.items())[:5]}")
        if self.rejected_acknowledged:
            shown = list(self.rejected_acknowledged.items())[:5]
            out.append(f"{len(self.rejected_acknowledged)} good reports rejected: {shown}")
        if self.duplicate_sample_ids or self.receipts_in_two_samples:
            out.append(
                f"duplicates: {self.duplicate_sample_ids} sample ids, "
                f"{self.receipts_in_two_samples} receipts in two samples"
            )
        if self.undecodable:
            out.append(f"undecodable records: {self.undecodable[:5]}")
        return out


class Ledger:
    """What the log holds so far, read a little more each time (read_committed)."""

    TOPICS = (topics.INFERENCE, topics.REPORTS, topics.SAMPLES)

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.positions: dict[str, dict[int, int]] = {t: {} for t in self.TOPICS}
        self.recorded: set[str] = set()
        #: (scenario, report id) -> (partition, offset) of its first ReportSubmitted
        self.reports: dict[tuple[str, str], tuple[int, int]] = {}
        self.fates: Counter[tuple[str, str]] = Counter()
        self.rejected: dict[str, str] = {}
        self.sample_ids: Counter[str] = Counter()
        self.receipt_samples: Counter[str] = Counter()
        self.undecodable: list[str] = []
        self.records = 0

    def update(self) -> float:
        """Read every topic to its end now; seconds it took."""
        began = time.monotonic()
        asyncio.run(self._update())
        return time.monotonic() - began

    async def _update(self) -> None:
        log = KafkaLog(
            self.bootstrap,
            topic_prefix=self.prefix,
            client_id="chaos-ledger",
            request_timeout_ms=15000,
        )
        store = EventStore(log)
        for topic in self.TOPICS:
            ends = await log.end_offsets(topic)
            start = self.positions[topic]
            async for stored in store.read(topic, start=dict(start), until=ends):
                self.records += 1
                record = stored.record
                event = stored.event
                if event is None:
                    self.undecodable.append(
                        f"{topic}/{record.partition}@{record.offset}: {stored.error}"
                    )
                    continue
                if isinstance(event, InferenceRecorded):
                    if event.complete:
                        self.recorded.add(event.event_id)
                elif isinstance(event, ReportSubmitted):
                    self.reports.setdefault(
                        (event.scenario, event.event_id), (record.partition, record.offset)
                    )
                elif isinstance(event, SampleJoined | ReportRejected):
                    self.fates[(event.scenario, event.report_id)] += 1
                    if isinstance(event, ReportRejected):
                        self.rejected[event.report_id] = event.reason
                    else:
                        self.sample_ids[event.event_id] += 1
                        if self.sample_ids[event.event_id] == 1:
                            for receipt in event.references:
                                self.receipt_samples[receipt] += 1
            self.positions[topic] = dict(ends)

    def check(self, load: LoadResult, report_cut: Mapping[int, int] | None) -> CheckResult:
        """Acknowledged -> on the log; reports below ``report_cut`` (partition -> offset;
        None: all of them) have one fate; no sample twice."""
        out = CheckResult(undecodable=list(self.undecodable))
        out.lost_receipts = sorted(set(load.receipts) - self.recorded)
        submitted = self.reports
        out.lost_reports = sorted(r for r, s in load.reports.items() if (s, r) not in submitted)
        for (scenario, report), (partition, offset) in submitted.items():
            below = report_cut is None or offset < report_cut.get(partition, 0)
            if below and self.fates[(scenario, report)] == 0:
                out.without_fate.append(f"{scenario}/{report}@{partition}:{offset}")
        out.several_fates = {f"{s}/{r}": n for (s, r), n in self.fates.items() if n > 1}
        out.rejected_acknowledged = {
            r: reason for r, reason in self.rejected.items() if r in load.reports
        }
        out.duplicate_sample_ids = sum(n - 1 for n in self.sample_ids.values() if n > 1)
        out.receipts_in_two_samples = sum(1 for n in self.receipt_samples.values() if n > 1)
        return out


def cut_for(seen: Observation, topic: str) -> dict[int, int]:
    """Partition -> end offset of one (prefixed) topic in an observation."""
    return {tp.partition: off for tp, off in seen.ends.items() if tp.topic == topic}


def tail_lines(paths: Iterable[Path], lines: int = 30) -> str:
    out = []
    for path in paths:
        text = stack_process.tail(path, lines)
        out.append(f"--- {path}\n{text}")
    return "\n".join(out)
