"""The consistency check every fault test ends with, read from the log itself.

* nothing acknowledged is lost: every receipt a client got is a complete
  ``InferenceRecorded`` in ``reef.inference``, every report acknowledged is in
  ``reef.reports``;
* every report in the log has exactly one fate in ``reef.samples`` (a ``SampleJoined``
  or a ``ReportRejected``), and an acknowledged report on an acknowledged receipt is
  joined, not rejected;
* no sample twice: no sample id twice, no receipt in two samples, no sample trained
  into two releases;
* the release chain is valid and every sample's references are recorded exchanges
  (:mod:`reef.services.audit`; artifacts too when a content store is given).

The log is read with Reef's own :class:`~reef.services.eventstore.EventStore` (read_committed
on Kafka), restricted to the test's scenarios.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import (
    Event,
    InferenceRecorded,
    ReleaseCommitted,
    ReportRejected,
    ReportSubmitted,
    SampleJoined,
)
from reef.log.base import EventLog
from reef.services import audit
from reef.services.eventstore import EventStore
from reef_dev.load import LoadResult

LogFactory = Callable[[], EventLog]

TOPICS = (
    topics.SCENARIOS,
    topics.INFERENCE,
    topics.REPORTS,
    topics.SAMPLES,
    topics.RELEASES,
)


@dataclass
class Consistency:
    """What the log says, against what the clients were told."""

    recorded: int = 0
    reports_in_log: int = 0
    lost_receipts: list[str] = field(default_factory=list)
    lost_reports: list[str] = field(default_factory=list)
    without_fate: list[str] = field(default_factory=list)
    several_fates: dict[str, int] = field(default_factory=dict)
    rejected_acknowledged: dict[str, str] = field(default_factory=dict)
    duplicate_sample_ids: int = 0
    receipts_in_two_samples: int = 0
    samples_in_two_releases: int = 0
    undecodable: list[str] = field(default_factory=list)
    audit_problems: list[str] = field(default_factory=list)
    samples: int = 0
    releases: int = 0

    @property
    def lost(self) -> int:
        return len(self.lost_receipts) + len(self.lost_reports)

    @property
    def duplicated(self) -> int:
        return (
            self.duplicate_sample_ids + self.receipts_in_two_samples + self.samples_in_two_releases
        )

    def problems(self) -> list[str]:
        out = []
        if self.lost_receipts:
            out.append(
                f"{len(self.lost_receipts)} receipts not in the log: {self.lost_receipts[:5]}"
            )
        if self.lost_reports:
            out.append(f"{len(self.lost_reports)} reports not in the log: {self.lost_reports[:5]}")
        if self.without_fate:
            out.append(f"{len(self.without_fate)} reports without a fate: {self.without_fate[:5]}")
        if self.several_fates:
            out.append(f"reports with several fates: {list(self.several_fates.items())[:5]}")
        if self.rejected_acknowledged:
            shown = list(self.rejected_acknowledged.items())[:5]
            out.append(f"{len(self.rejected_acknowledged)} good reports rejected: {shown}")
        if self.duplicated:
            out.append(
                f"duplicates: {self.duplicate_sample_ids} sample ids, "
                f"{self.receipts_in_two_samples} receipts in two samples, "
                f"{self.samples_in_two_releases} samples in two releases"
            )
        if self.undecodable:
            out.append(f"undecodable records: {self.undecodable[:5]}")
        out += [f"audit: {p}" for p in self.audit_problems]
        return out

    def assert_ok(self) -> None:
        problems = self.problems()
        assert not problems, "consistency check failed:\n  " + "\n  ".join(problems)

    def summary(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "reports_in_log": self.reports_in_log,
            "samples": self.samples,
            "releases": self.releases,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "problems": len(self.problems()),
        }


def read_events(
    new_log: LogFactory, scenarios: Collection[str], topic_names: Sequence[str] = TOPICS
) -> tuple[list[Event], list[str]]:
    """Every event of the test's scenarios on the topics (and undecodable records)."""
    wanted = set(scenarios)

    async def read() -> tuple[list[Event], list[str]]:
        log = new_log()
        await log.start()
        try:
            store = EventStore(log)
            found: list[Event] = []
            bad: list[str] = []
            for topic in topic_names:
                async for stored in store.read(topic):
                    if stored.event is None:
                        key = stored.record.key.decode() if stored.record.key else ""
                        if key in wanted:
                            bad.append(
                                f"{topic}/{stored.record.partition}@"
                                f"{stored.record.offset}: {stored.error}"
                            )
                    elif stored.event.scenario in wanted:
                        found.append(stored.event)
            return found, bad
        finally:
            await log.close()

    return asyncio.run(read())


def _fates(events: list[Event]) -> Counter[tuple[str, str]]:
    return Counter(
        (e.scenario, e.report_id) for e in events if isinstance(e, SampleJoined | ReportRejected)
    )


def wait_for_fates(
    new_log: LogFactory, scenarios: Collection[str], timeout: float = 60.0
) -> list[Event]:
    """Read until every report in the log has a fate (or the timeout); the events."""
    deadline = time.monotonic() + timeout
    while True:
        events, _ = read_events(new_log, scenarios)
        reports = {(e.scenario, e.event_id) for e in events if isinstance(e, ReportSubmitted)}
        if reports <= set(_fates(events)) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def check(
    new_log: LogFactory,
    load: LoadResult,
    scenarios: Collection[str],
    *,
    content: ContentStore | None = None,
    fate_timeout: float = 60.0,
) -> Consistency:
    """The full check, once the processors decided every report (or ``fate_timeout``)."""
    wait_for_fates(new_log, scenarios, fate_timeout)
    events, bad = read_events(new_log, scenarios)
    out = Consistency(undecodable=bad)

    recorded = {e.event_id for e in events if isinstance(e, InferenceRecorded) and e.complete}
    out.recorded = len(recorded)
    out.lost_receipts = sorted(set(load.receipts) - recorded)

    submitted = {(e.scenario, e.event_id) for e in events if isinstance(e, ReportSubmitted)}
    out.reports_in_log = len(submitted)
    out.lost_reports = sorted(r for r, s in load.reports.items() if (s, r) not in submitted)

    fates = _fates(events)
    out.without_fate = sorted(f"{s}/{r}" for s, r in submitted - set(fates))
    out.several_fates = {f"{s}/{r}": n for (s, r), n in fates.items() if n > 1}
    for event in events:
        if isinstance(event, ReportRejected) and event.report_id in load.reports:
            out.rejected_acknowledged[event.report_id] = event.reason

    samples = [e for e in events if isinstance(e, SampleJoined)]
    out.samples = len(samples)
    out.duplicate_sample_ids = len(samples) - len({s.event_id for s in samples})
    unique = {s.event_id: s for s in samples}.values()
    per_receipt = Counter(r for s in unique for r in s.references)
    out.receipts_in_two_samples = sum(1 for n in per_receipt.values() if n > 1)

    commits = [e for e in events if isinstance(e, ReleaseCommitted)]
    out.releases = len(commits)
    trained = Counter(
        sample for c in {c.release_id: c for c in commits}.values() for sample in c.sample_ids
    )
    out.samples_in_two_releases = sum(1 for n in trained.values() if n > 1)

    report = audit.AuditReport()
    chain = audit.verify_chain(events, report)
    if content is not None:
        audit.verify_content(chain, content, report)
    audit.verify_samples(events, report)
    out.audit_problems = list(report.problems)
    return out
