"""The compute floor of the join in Python, beside the throughput targets of its hosts.

    .venv/bin/python bench/join_floor.py [--reports N] [--repeat 5]

What every host must do per report, with nothing else: decode its two input records
(``InferenceRecorded``, ``ReportSubmitted``: single-object Avro through Reef's codec),
run the pure join step on an in-memory ``DictState``, and encode its output
(``SampleJoined``). No log, no SQLite, no Kafka, no event loop, no transaction: a host
can only be slower than this. Replay does the decode and the step for each input event,
so its floor per event is half of (decode + step) per report.

The codec's stages are also timed on its reference path (fastavro, validating on encode:
the path the compiled plans of :mod:`reef.avro_plan` stand in for), in the same run.
Stages are timed in CPU time of this process (``time.process_time``): the cost per event
is what this measures, and on a shared machine wall time also counts the time other
processes held the core. Prints the best of ``--repeat`` passes per stage, the floor in
reports/s and events/s on one core, and each throughput target as a share of that floor
(a share above 100% means the target cannot be met by any host of this design on this
machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reef.catalog import join_settings
from reef.codec import EventCodec
from reef.core.join import JoinProcessor
from reef.core.state import DictState
from reef.settings import Settings
from reef_dev.events import inference, receipt, report

#: the join's throughput targets: (row, unit, value per second)
TARGETS = (
    ("embedded host", "reports/s", 20_000),
    ("Kafka host", "reports/s", 5_000),
    ("replay", "events/s", 50_000),
)


#: the codec's reference path (fastavro, with validation on encode), the path the compiled
#: plans stand in for, timed in the same run for the comparison
REFERENCE_DECODE = "decode 2 records, reference path"
REFERENCE_ENCODE = "encode 1 output, reference path"


def stage_seconds(reports: int, repeat: int) -> dict[str, float]:
    codec = EventCodec()
    now = datetime.now(UTC)
    events = []
    for i in range(reports):
        scenario = f"bench-{i % 12}"
        rec = receipt(scenario, i)
        events += [inference(scenario, rec, now), report(scenario, f"rep-{i}", [rec], now)]
    payloads = [codec.encode(event)[0] for event in events]
    best: dict[str, float] = {}
    for _ in range(repeat):
        began = time.process_time()
        decoded = [codec.decode(payload) for payload in payloads]
        decoded_at = time.process_time()
        join, state, outputs = JoinProcessor(join_settings(Settings())), DictState(), []
        for event in decoded:
            outputs += join.step(state, event)
        stepped_at = time.process_time()
        for output in outputs:
            codec.encode(output)
        encoded_at = time.process_time()
        assert len(outputs) == reports, f"{len(outputs)} outputs for {reports} reports"
        for payload in payloads:
            codec.decode_reference(payload)
        referenced_at = time.process_time()
        for output in outputs:
            codec.encode_reference(output)
        for stage, seconds in (
            ("decode 2 records", decoded_at - began),
            ("join step", stepped_at - decoded_at),
            ("encode 1 output", encoded_at - stepped_at),
            (REFERENCE_DECODE, referenced_at - encoded_at),
            (REFERENCE_ENCODE, time.process_time() - referenced_at),
        ):
            best[stage] = min(best.get(stage, float("inf")), seconds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    best = stage_seconds(args.reports, args.repeat)
    per_report = {stage: seconds / args.reports for stage, seconds in best.items()}
    reference = {stage: per_report.pop(stage) for stage in (REFERENCE_DECODE, REFERENCE_ENCODE)}
    floor_report = sum(per_report.values())
    floor_replay_event = (per_report["decode 2 records"] + per_report["join step"]) / 2
    print(f"join compute floor, {args.reports} reports, best of {args.repeat}:")
    for stage, seconds in per_report.items():
        print(f"  {stage:18s} {seconds * 1e6:8.1f} us per report")
    print(f"  {'total':18s} {floor_report * 1e6:8.1f} us per report")
    print("\nthe codec's reference path (fastavro; validation on encode), same run:")
    for stage, seconds in reference.items():
        fast = per_report[stage.split(",")[0]]
        print(f"  {stage:34s} {seconds * 1e6:8.1f} us per report ({seconds / fast:.1f}x the plans)")
    ceilings = {"reports/s": 1 / floor_report, "events/s": 1 / floor_replay_event}
    print("\ntarget vs the floor on one core (host overhead not included):")
    for row, unit, target in TARGETS:
        ceiling = ceilings[unit]
        print(
            f"  {row:14s} target {target:>7,} {unit:9s} floor allows {ceiling:>9,.0f}"
            f"  target = {target / ceiling:6.0%} of the floor"
        )


if __name__ == "__main__":
    main()
