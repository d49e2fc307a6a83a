"""The output of bench/join_throughput.py: the table of rows and the profile."""

from __future__ import annotations

import io
import os
import pstats
import re
import subprocess

from bench.join_workload import PARTITIONS, REPO_ROOT, Bench

#: the host's per-record path: (label, file suffix, function name)
PER_RECORD = (
    ("StreamsHost._loop (whole worker loop)", "streams/host.py", "_loop"),
    ("  consumer.getmany (fetch, decompress, records)", "aiokafka/consumer/consumer.py", "getmany"),
    ("  BatchRunner.run", "streams/batch.py", "run"),
    ("    compute (step 1)", "streams/batch.py", "compute"),
    ("      heapq.merge of the poll", "heapq.py", "merge"),
    ("      _decode -> EventCodec.decode", "reef/codec.py", "decode"),
    ("        fastavro schemaless_reader", "fastavro", "schemaless_reader"),
    ("      JoinProcessor.step", "reef/core/join.py", "step"),
    ("        join _expire (parked/<scenario> read)", "reef/core/join.py", "_expire"),
    ("        join _park", "reef/core/join.py", "_park"),
    ("        join _retry_parked", "reef/core/join.py", "_retry_parked"),
    ("        WriteBuffer.get", "reef/core/state.py", "get"),
    ("          PartitionStore.get (RocksDB + json)", "streams/store.py", "get"),
    ("      EventCodec.encode (outputs)", "reef/codec.py", "encode"),
    ("        codec _validate (fastavro validate)", "reef/codec.py", "_validate"),
    ("      store.encode_value (changelog JSON)", "streams/store.py", "encode_value"),
    ("    _commit (step 2: the transaction)", "streams/batch.py", "_commit"),
    ("      producer.send", "aiokafka/producer/producer.py", "send"),
    (
        "      send_offsets_to_transaction",
        "aiokafka/producer/producer.py",
        "send_offsets_to_transaction",
    ),
    ("      commit_transaction", "aiokafka/producer/producer.py", "commit_transaction"),
    ("    PartitionStore.write (step 3)", "streams/store.py", "write"),
    ("json.dumps (all)", "json/__init__.py", "dumps"),
    ("json.loads (all)", "json/__init__.py", "loads"),
    ("waiting in epoll", "~", "<method 'poll' of 'select.epoll' objects>"),
)


def print_profile(
    stats: pstats.Stats, events: int, rate: float, diagnosis: str, limit: int = 30
) -> None:
    raw = stats.stats  # type: ignore[attr-defined]
    print(
        f"\n-- reef streams x1 under cProfile (main thread): {rate:,.0f} reports/s while profiled"
    )
    print(f"   {diagnosis}")
    computed = sum(
        nc
        for (file, _, func), (_cc, nc, _tt, _ct, _) in raw.items()
        if file.endswith("streams/batch.py") and func == "_decode"
    )
    if computed:
        print(
            f"   records run through the processors: {computed} for {events} in the log "
            f"(x{computed / events:.2f}{': some computed twice' if computed > events else ''})"
        )
    print(f"   per input record ({events} records; cumulative time, coroutine resumptions count")
    print("   as calls, so awaited I/O shows up in the caller's cumulative time):")
    print(f"   {'step':52} {'us/record':>10} {'calls/record':>13}")
    for label, suffix, name in PER_RECORD:
        cum = calls = 0.0
        for (file, _, func), (_cc, nc, _tt, ct, _) in raw.items():
            if func == name and suffix in file:
                cum += ct
                calls += nc
        if calls:
            print(f"   {label:52} {1e6 * cum / events:10.1f} {calls / events:13.2f}")
    text = io.StringIO()
    stats.stream = text  # type: ignore[attr-defined]
    stats.sort_stats("cumulative").print_stats(limit)
    body = text.getvalue()
    start = body.find("   ncalls")
    print(f"\n   top {limit} functions by cumulative time:")
    print(body[start:].rstrip() if start >= 0 else body.rstrip())
    text = io.StringIO()
    stats.stream = text  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(15)
    body = text.getvalue()
    start = body.find("   ncalls")
    print("\n   top 15 functions by own time:")
    print(body[start:].rstrip() if start >= 0 else body.rstrip())


# -- output ------------------------------------------------------------------------------


def code_version() -> str:
    """The checkout measured: HEAD and whether reef/ or streams/ differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return f"{REPO_ROOT} (not a git checkout)"
    dirty = git("status", "--porcelain", "--", "reef", "streams", "schemas")
    return f"{head}{' + uncommitted changes in reef/ streams/' if dirty else ''}"


def print_table(bench: Bench, load: tuple[float, float]) -> None:
    n = bench.reports
    print()
    print(
        f"== join throughput: {n:,} reports ({2 * n:,} input events), {PARTITIONS} partitions, "
        f"Kafka single node {bench.bootstrap or '-'}; code {bench.code}"
    )
    print(
        f"== measured under CPU contention: {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} at start, {load[1]:.1f} at end (other Kafka test runs on this machine);"
        " cpu-s = CPU seconds of the measured process(es) over the same span"
    )
    head = (
        f"{'row':32} {'reports':>7} {'events':>6} {'seconds':>7} {'reports/s':>9} "
        f"{'events/s':>8} {'cpu-s':>6} {'rep/cpu-s':>9}  {'target':40} {'':5} measured; notes"
    )
    print(head)
    print("-" * len(head))
    for r in bench.rows:
        status = "" if r.ok is None else ("ok" if r.ok else "BELOW")
        cpu = f"{r.cpu:6.1f}" if r.cpu else f"{'-':>6}"
        per_cpu = f"{r.reports_per_cpu_s:9,.0f}" if r.reports_per_cpu_s else f"{'-':>9}"
        print(
            f"{r.name:32} {r.reports:7d} {r.events:6d} {r.seconds:7.2f} {r.reports_per_s:9,.0f} "
            f"{r.events_per_s:8,.0f} {cpu} {per_cpu}  {r.target:40} {status:5} {r.measured}"
            + (f"; {r.note}" if r.note else "")
        )
    f = bench.figures
    print()
    which = "gated x1" if "reef_x1_gated" in f else "Ready x1"
    reef = f.get("reef_x1_gated", f.get("reef_x1_ready", 0.0))
    reef_cpu = f.get("reef_x1_gated_cpu", f.get("reef_x1_ready_cpu", 0.0))
    if reef and f.get("quix"):
        verdict = "beats" if reef > f["quix"] else "does NOT beat"
        print(
            f"reef streams ({which}) / quixstreams: {reef / f['quix']:.2f}x wall "
            f"(target > 1: Reef's host {verdict} quixstreams)"
            + (f", {reef_cpu / f['quix_cpu']:.2f}x per CPU-second" if f.get("quix_cpu") else "")
        )
    if reef and f.get("ceiling_events"):
        print(
            f"reef streams ({which}) / aiokafka EOS ceiling (events/s): "
            f"{2 * reef / f['ceiling_events']:.3f} wall ({2 * reef:,.0f} of "
            f"{f['ceiling_events']:,.0f})"
            + (
                f", {2 * reef_cpu / f['ceiling_events_cpu']:.3f} per CPU-second"
                if f.get("ceiling_events_cpu")
                else ""
            )
        )
    scaled = sorted(
        (int(m.group(1)), v) for k, v in f.items() if (m := re.fullmatch(r"reef_x(\d+)_gated", k))
    )
    if len(scaled) > 1 and scaled[0][1]:
        ratios = ", ".join(f"x{w}: {v / scaled[0][1]:.2f}" for w, v in scaled)
        cpu = {w: f.get(f"reef_x{w}_gated_cpu", 0.0) for w, _ in scaled}
        per_cpu = ", ".join(f"x{w}: {c:,.0f}" for w, c in cpu.items())
        print(
            f"scaling on {PARTITIONS} partitions (throughput vs {scaled[0][0]} worker): {ratios}"
            f" (on {os.cpu_count()} shared cores: more workers share the same CPUs);"
            f" reports per CPU-second of all workers: {per_cpu}"
        )
    print("\nnotes:")
    for note in [
        *bench.notes,
        "every Kafka row has its own fresh topic prefix, deleted at the end; targets are the "
        "issue's: Kafka host >= 5,000 reports/s (>= 10,000 events/s) catch-up, embedded "
        ">= 20,000 reports/s, replay >= 50,000 events/s",
        "gated rows: the backlog is one open transaction until every process is Ready (and "
        "the workers' final assignments cover the 6 partitions); the clock starts at its "
        "commit, so startup and the initial rebalances are excluded (a membership lost "
        "during the catch-up is not: see 'session expiries')",
        "anchor A decodes with a cheap stand-in (a pure-Python walk of the Avro fields the "
        "join needs, no schema resolution/validation) and emits JSON, where Reef decodes "
        "full Avro events and encodes validated Avro SampleJoined: anchor A does less work; "
        "its CPU time includes librdkafka's threads",
        "anchor B (aiokafka EOS copy) is the ceiling of a Python host on aiokafka here: "
        "same consumer/producer settings and transaction pattern as streams/host.py, no work",
        "replay rows: reef.services.replay.replay() called in this process "
        "(what `reef replay` runs, "
        "without the CLI's start-up); events = processor input events it reports",
    ]:
        print(f"  - {note}")
