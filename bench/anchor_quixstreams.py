"""Anchor A of bench/join_throughput.py: the join's keyed work as a quixstreams application.

    <anchors-venv>/bin/python bench/anchor_quixstreams.py --bootstrap HOST:PORT \
        --group G --inference T --reports T --output T --state-dir DIR [--commit-interval S]

Runs in its own virtual environment (quixstreams is never a Reef dependency; the
benchmark creates ``~/.cache/reef-bench/anchors-venv`` and starts this file with its
interpreter), so it imports nothing from Reef.

The work, per record of the two co-partitioned input topics (``concat`` of both
dataframes: quixstreams then aligns the partitions of both topics by timestamp, as
Reef's host merges them):

* ``InferenceRecorded``: store ``rec/<receipt>`` (release, route, request and response
  bodies) in the RocksDB state of the record's key (the scenario), unless present;
* ``ReportSubmitted``: look the quoted receipt up, mark it consumed and the report seen,
  and emit one joined record (JSON: the report id and the trajectory, like Reef's
  ``SampleJoined.trajectory_json``); a report whose receipt is not (yet) in the state
  emits a ``missing`` record instead, so the output count always equals the reports.

Decoding is a cheap stand-in: the Avro single-object payloads are walked in pure Python
for the fields the join needs (no schema resolution, no full record, no validation),
and the output is plain JSON, not an Avro ``SampleJoined``. Exactly-once processing
(one transactional producer, commits every ``--commit-interval`` seconds) with the
state's changelog topics on.

Prints ``anchor: ready`` (flushed) once the first partition assignment has been taken
up, and ``anchor: joined=J missing=M`` when stopped (SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from quixstreams import Application, message_context

READY = "anchor: ready"
HEADER_LEN = 10  # C3 01 + 8-byte schema fingerprint


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``pos``: (value, next position)."""
    byte = buf[pos]
    pos += 1
    n = byte & 0x7F
    shift = 7
    while byte & 0x80:
        byte = buf[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _str(buf: bytes, pos: int) -> tuple[str, int]:
    size, pos = _long(buf, pos)
    return buf[pos : pos + size].decode(), pos + size


def _opt_str(buf: bytes, pos: int) -> tuple[str | None, int]:
    branch, pos = _long(buf, pos)
    return (None, pos) if branch == 0 else _str(buf, pos)


def inference_fields(payload: bytes) -> tuple[str, dict[str, Any]]:
    """receipt and the record the join keeps, from an ``InferenceRecorded`` payload."""
    pos = HEADER_LEN
    receipt, pos = _str(payload, pos)  # event_id
    _, pos = _str(payload, pos)  # scenario
    _, pos = _long(payload, pos)  # occurred_at
    for _ in range(2):  # producer, dialect
        _, pos = _str(payload, pos)
    route, pos = _str(payload, pos)
    release, pos = _str(payload, pos)
    served, pos = _opt_str(payload, pos)
    for _ in range(2):  # weight_version, model
        _, pos = _opt_str(payload, pos)
    pos += 1  # stream
    _, pos = _long(payload, pos)  # status
    pos += 1  # complete
    _, pos = _opt_str(payload, pos)  # error
    request, pos = _opt_str(payload, pos)
    _, pos = _opt_str(payload, pos)  # request_ref
    response, pos = _opt_str(payload, pos)
    return receipt, {
        "release_id": served or release,
        "route": route,
        "request": request,
        "response": response,
    }


def report_fields(payload: bytes) -> tuple[str, list[str]]:
    """report id and quoted receipts, from a ``ReportSubmitted`` payload."""
    pos = HEADER_LEN
    report, pos = _str(payload, pos)  # event_id
    _, pos = _str(payload, pos)  # scenario
    _, pos = _long(payload, pos)  # occurred_at
    _, pos = _str(payload, pos)  # producer
    pos += 8  # score (double)
    _, pos = _str(payload, pos)  # feedback_json
    references: list[str] = []
    while True:  # array blocks
        count, pos = _long(payload, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _long(payload, pos)  # block size in bytes
        for _ in range(count):
            ref, pos = _str(payload, pos)
            references.append(ref)
    return report, references


class Join:
    def __init__(self, inference_topic: str) -> None:
        self.inference_topic = inference_topic
        self.joined = 0
        self.missing = 0

    def __call__(self, value: bytes, state: Any) -> bytes | None:
        if message_context().topic == self.inference_topic:
            receipt, record = inference_fields(value)
            key = f"rec/{receipt}"
            if state.get(key) is None:
                state.set(key, record)
            return None
        report, references = report_fields(value)
        records = [state.get(f"rec/{r}") for r in references]
        if any(r is None for r in records):
            self.missing += 1
            return json.dumps({"report": report, "fate": "missing"}).encode()
        for receipt in references:
            state.set(f"consumed/{receipt}", report)
        state.set(f"report/{report}", "accepted")
        self.joined += 1
        trajectory = [{"receipt": r, **rec} for r, rec in zip(references, records, strict=True)]
        return json.dumps(
            {"report": report, "fate": "joined", "trajectory_json": json.dumps(trajectory)}
        ).encode()


class ReadyApplication(Application):
    """Prints the ready marker after the first assignment (quixstreams' own callback)."""

    _announced = False

    def _on_assign(self, consumer: Any, topic_partitions: Any) -> None:
        super()._on_assign(consumer, topic_partitions)
        if topic_partitions and not self._announced:
            self._announced = True
            print(READY, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--inference", required=True)
    parser.add_argument("--reports", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--commit-interval", type=float, default=1.0)
    args = parser.parse_args()

    app = ReadyApplication(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    raw = {"key_deserializer": "bytes", "value_deserializer": "bytes"}
    inference = app.topic(args.inference, **raw)
    reports = app.topic(args.reports, **raw)
    output = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    join = Join(args.inference)
    sdf = app.dataframe(inference).concat(app.dataframe(reports))
    sdf = sdf.apply(join, stateful=True).filter(lambda value: value is not None)
    sdf.to_topic(output)
    app.run()
    print(f"anchor: joined={join.joined} missing={join.missing}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
