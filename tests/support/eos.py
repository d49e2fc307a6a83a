"""A workload that catches duplicates and losses: reports with resends, producer retries
and second reports on consumed receipts, cut into chunks, with the fates it must produce."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from reef.core.events import Event, ReportRejected, SampleJoined
from reef.core.ids import derived_id
from reef_dev.events import inference, receipt, report


def now() -> datetime:
    """Now, to the millisecond (what Avro's timestamp-millis keeps)."""
    moment = datetime.now(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


@dataclass
class Plan:
    chunks: list[list[Event]]
    joined: set[str]
    rejected: dict[str, str]
    reports: int


def eos_plan(reports: int, chunk_size: int, seed: int) -> Plan:
    """Reports on one receipt each (some before their exchange), plus identical resends,
    producer retries (the same event appended twice) and second reports on a consumed
    receipt (in a later chunk than the first), in chunks."""
    rng = random.Random(seed)
    scenarios = [f"eos-{i}" for i in range(6)]
    chunks: list[list[Event]] = []
    joined: set[str] = set()
    rejected: dict[str, str] = {}
    carry: list[Event] = []
    for start in range(0, reports, chunk_size):
        chunk: list[Event] = list(carry)
        carry = []
        for i in range(start, min(start + chunk_size, reports)):
            s = scenarios[i % len(scenarios)]
            rec = receipt(s, i)
            exchange = inference(s, rec, now(), release=f"rel-{i % 3}")
            good = report(s, f"rep-{i}", [rec], now(), score=float(i % 2))
            chunk += [good, exchange] if i % 7 == 0 else [exchange, good]
            joined.add(derived_id("sample", s, good.event_id, good.content_hash))
            roll = rng.random()
            if roll < 0.15:  # the client resent it (a new record, identical content)
                chunk.append(report(s, f"rep-{i}", [rec], now(), score=float(i % 2)))
            elif roll < 0.25:  # the producer retried: the very same record twice
                chunk.append(good)
            elif roll < 0.30:  # another report on the same receipt, later
                again = report(s, f"again-{i}", [rec], now())
                carry.append(again)
                rejected[derived_id("rejected", s, again.event_id, again.content_hash)] = (
                    "already_consumed"
                )
        chunks.append(chunk)
    if carry:
        chunks.append(carry)
    return Plan(chunks, joined, rejected, reports)


def check_eos(outputs: list[Event], plan: Plan) -> None:
    ids = Counter(o.event_id for o in outputs)
    assert not {i: n for i, n in ids.items() if n > 1}, "duplicate output ids (committed)"
    by_report = Counter((o.scenario, o.report_id) for o in outputs)  # type: ignore[attr-defined]
    assert not {k: n for k, n in by_report.items() if n > 1}, "a report with two fates"
    samples = {o.event_id for o in outputs if isinstance(o, SampleJoined)}
    missing, extra = plan.joined - samples, samples - plan.joined
    assert not missing and not extra, f"missing {len(missing)}, unexpected {len(extra)}"
    rejections = {o.event_id: o.reason for o in outputs if isinstance(o, ReportRejected)}
    assert rejections == plan.rejected
    receipts = [r for o in outputs if isinstance(o, SampleJoined) for r in o.references]
    assert len(receipts) == len(set(receipts)), "a receipt in two samples"
