"""Proxy overhead: direct calls vs calls through Reef, measured in one run.

Every target fronts the SAME scripted upstream (reef/testing/scripted_upstream.py, raw
ASGI on uvicorn). Load comes from ``wrk`` (Debian package ``wrk``), which measures the
server rather than a Python client:

- latency: one connection, sequential requests → p50/p99; "added" is the target's p50/p99
  minus the direct p50/p99 of the same round;
- throughput: 16 connections → sustained requests/s;
- streaming: wrk on ``"stream": true`` (the SSE read to its end), plus a one-connection
  probe (bench/proxy_ttfb.py) for the added time to the first byte and per SSE event.

Targets: direct, Reef on the embedded log, Reef on Kafka (``--kafka-bootstrap``, default:
the local stack's single node if it answers), Reef on the embedded log with OpenTelemetry
tracing on (``reef-embedded+otel``: spans exported to ``--otlp-endpoint``, default the
local stack's collector if it answers; its requests carry a ``traceparent``), with
``--baseline REF`` the same two Reefs built from a git ref (``HEAD``: before/after the work
tree's changes, side by side in this run), with ``--workers N`` the work tree's two Reefs
again as ``reef serve --workers N``, a LiteLLM proxy if ``--litellm`` names an executable,
and the existing Reef (PyPI ``reef-infra``, record-only; it needs Python >= 3.12, e.g. a
pyenv 3.12 venv) if ``--reef-infra`` names its ``reef``. ``--only-otel`` keeps direct and
the two embedded Reefs (tracing off and on) alone, plus the baseline's embedded Reef with
``--baseline``.

Workloads: ``small`` is a one-line chat request (buffered and streamed); ``agent`` is the
captured Claude Code request (tests/fixtures/agents/claude_code/quiet/first_request.json,
its bytes as captured but ``"stream":false``) on buffered ``/v1/messages``, which the
stand-in answers with the Write call the capture's prompt scripts; the table ends with
the ratio agent/small of every Reef's added p50 and req/s. ``--large-mb 2,6`` adds that
request grown to 2 and 6 MB (the repository's Python source as extra system-prompt text,
which compresses like the files an agent reads) at one connection. ``--workloads agent``
and ``--no-stream`` shorten a run to what is being compared.

The machine is shared and noisy: every measurement is repeated ``--rounds`` times, the
targets interleaved within a round, and the table shows the median with its spread
(min-max). After the load each Reef takes a short run whose receipts are collected, is
stopped, and its log is read back: "durable" counts the receipts found in the log.

    .venv/bin/python bench/proxy_overhead.py [--seconds 5] [--rounds 3] [--baseline HEAD]
        [--kafka-bootstrap 127.0.0.1:19092] [--otlp-endpoint http://127.0.0.1:14318]
        [--litellm PATH] [--reef-infra PATH] [--workers 2] [--only-otel]
        [--workloads small,agent] [--large-mb 2,6] [--no-stream]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proxy_targets import (
    ReefTarget,
    cpu_seconds,
    export_tree,
    logged_receipts,
    start_target,
)
from bench.proxy_ttfb import StreamTiming, probe
from reef.testing.servers import (
    REPO_ROOT,
    ManagedProcess,
    UpstreamProcess,
    free_port,
    running_upstream,
    spawn,
)
from reef_dev.stack.collector import LOCAL_ENDPOINT as LOCAL_OTLP

TOKEN = "bench-token"
#: LiteLLM refuses to start without a master key; authenticated like Reef, so it is fair
LITELLM_KEY = "sk-bench-0123456789abcdef0123456789abcdef"
#: the traced target's requests continue a caller's trace, as an instrumented agent's would
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "Return exactly: reef is ready"}],
}
AGENT_REQUEST: Final = REPO_ROOT / "tests/fixtures/agents/claude_code/quiet/first_request.json"
#: collects each reply's status and receipt (header, or the in-stream ``agent_record_id``)
RECEIPT_LUA = """
local out = nil
response = function(status, headers, body)
  if out == nil then out = io.open(RECEIPTS, "a") end
  local receipt = headers["x-reef-agent-record-id"]
  if receipt == nil then receipt = string.match(body, 'agent_record_id"%s*:%s*"(%x+)"') end
  out:write(status, " ", receipt or "-", "\\n")
  out:flush()
end
"""


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]
    reef: ReefTarget | None = None
    #: the ``/v1`` base for the agent workloads; None: small chat requests only
    v1: str | None = None


@dataclass(frozen=True)
class Workload:
    """One kind of request: its route, its exact bytes, the modes it is measured in."""

    name: str
    path: str
    body: bytes
    streams: tuple[bool, ...] = (False,)
    connections: tuple[int, ...] = (1, 16)

    def url(self, target: Target) -> str | None:
        if self.name == "small":
            return target.url
        return None if target.v1 is None else f"{target.v1}{self.path}"


def small_workload(stream: bool) -> Workload:
    streams = (False, True) if stream else (False,)
    return Workload("small", "/chat/completions", json.dumps(BODY).encode(), streams)


def agent_request() -> bytes:
    """The captured Claude Code request, buffered: only its ``stream`` member differs."""
    raw = AGENT_REQUEST.read_bytes()
    assert raw.count(b'"stream":true') == 1, "the fixture's stream member moved"
    return raw.replace(b'"stream":true', b'"stream":false')


def grown_request(size: int) -> bytes:
    """The agent request grown to about ``size`` bytes with source text in its system
    prompt (the stand-in answers from the messages, so its answer stays the same)."""
    raw = agent_request()
    body = json.loads(raw)
    sources = "".join(p.read_text() for p in sorted((REPO_ROOT / "reef").rglob("*.py")))
    wanted = size - len(raw)
    text = (sources * (1 + wanted // len(sources)))[:wanted]
    body["system"].append({"type": "text", "text": text})
    # as a JavaScript client writes it (JSON.stringify: compact, UTF-8)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def workloads(names: list[str], large_mb: list[float], stream: bool) -> list[Workload]:
    found = []
    if "small" in names:
        found.append(small_workload(stream))
    if "agent" in names:
        found.append(Workload("agent", "/messages", agent_request()))
    for mb in large_mb:
        body = grown_request(int(mb * 1_000_000))
        found.append(Workload(f"agent-{mb:g}MB", "/messages", body, connections=(1,)))
    return found


@dataclass
class Result:
    target: str
    mode: str
    connections: int
    workload: str
    p50_ms: float
    p99_ms: float
    rps: float
    #: CPU the server (and its children) spent per reply; None for servers not started here
    cpu_ms: float | None = None


def lua_script(headers: dict[str, str], body: bytes, extra: str = "") -> tuple[Path, Path]:
    """The wrk script and the body file it reads (exact bytes, any size, any character)."""
    body_path = Path(tempfile.mkstemp(suffix=".json")[1])
    body_path.write_bytes(body)
    lines = [
        'wrk.method = "POST"',
        f'local f = io.open({json.dumps(str(body_path))}, "rb")',
        'wrk.body = f:read("*a")',
        "f:close()",
    ]
    lines.append('wrk.headers["Content-Type"] = "application/json"')
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    path = Path(tempfile.mkstemp(suffix=".lua")[1])
    path.write_text("\n".join(lines) + "\n" + extra)
    return path, body_path


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * _UNITS[unit]


def wrk(
    target: Target,
    body: bytes,
    connections: int,
    seconds: int,
    extra: str = "",
    url: str | None = None,
) -> str:
    script, body_path = lua_script(target.headers, body, extra)
    threads = "-t1" if connections == 1 or extra else "-t2"
    argv = ["wrk", threads, f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script)]
    argv.append(url or target.url)
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    script.unlink()
    body_path.unlink()
    return out


def small_body(stream: bool) -> bytes:
    return json.dumps({**BODY, "stream": stream}).encode()


def run_wrk(
    target: Target, workload: Workload, stream: bool, connections: int, seconds: int
) -> Result:
    pid = target.reef.process.pid if target.reef is not None else None
    cpu_before = cpu_seconds(pid) if pid is not None else 0.0
    body = small_body(stream) if workload.name == "small" else workload.body
    out = wrk(target, body, connections, seconds, url=workload.url(target))
    cpu = cpu_seconds(pid) - cpu_before if pid is not None else None
    replies = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    distribution = out.split("Latency Distribution", 1)[1]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", distribution, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", distribution, re.M).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"{target.name}: {errors.group(1)} error responses\n{out}")
    cpu_ms = None if cpu is None else 1000 * cpu / max(1, replies)
    mode = "stream" if stream else "buffered"
    return Result(target.name, mode, connections, workload.name, p50, p99, rps, cpu_ms)


def kafka_answers(bootstrap: str) -> bool:
    return answers(bootstrap)


def answers(address: str) -> bool:
    """Whether something accepts TCP connections at ``host:port`` (a URL's scheme is cut)."""
    host, _, port = address.split("://", 1)[-1].rstrip("/").partition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def listening(proc: ManagedProcess, port: int) -> str:
    """The chat completions URL of an anchor once its port accepts connections."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"http://127.0.0.1:{port}/v1/chat/completions"
        except OSError:
            time.sleep(0.5)
    proc.stop()
    raise SystemExit(f"{proc.argv[0]} did not start\n{proc.output()}")


def start_traced(upstream_v1: str, otlp: str, workdir: Path) -> Target:
    """The work tree's Reef on the embedded log, exporting a span per exchange to ``otlp``."""
    settings = {"REEF_OTEL_ENABLED": "true", "REEF_OTEL_ENDPOINT": otlp}
    reef = start_target(
        "reef-embedded+otel", upstream_v1, token=TOKEN, workdir=workdir, settings=settings
    )
    headers = {**reef.headers, "traceparent": TRACEPARENT}
    return Target(reef.name, f"{reef.base_url}/v1/chat/completions", headers, reef)


def start_litellm(executable: str, upstream_v1: str, workdir: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: gpt-4o\n    litellm_params:\n"
        f"      model: openai/gpt-4o\n      api_base: {upstream_v1}\n      api_key: sk-bench\n"
    )
    proc = spawn(
        [executable, "--config", str(config), "--port", str(port), "--num_workers", "1"],
        env={**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": LITELLM_KEY},
        log_dir=workdir,
        name="litellm",
    )
    return proc, listening(proc, port)


def start_reef_infra(
    executable: str, upstream_base: str, workdir: Path
) -> tuple[ManagedProcess, str]:
    """The existing Reef (PyPI ``reef-infra``, Python >= 3.12, its own venv), record-only:
    ``reef serve`` with an upstream URL and model, as its README starts it."""
    port = free_port()
    run_dir = workdir / "reef-infra"
    proc = spawn(
        [
            executable,
            "serve",
            "--inference.upstream-url",
            upstream_base,
            "--inference.upstream-model",
            "gpt-4o",
            "--reef.port",
            str(port),
            "--reef.token",
            TOKEN,
            "--reef.run-dir",
            str(run_dir),
        ],
        # its own `reef` package: not this checkout's (the working directory is on sys.path)
        env={
            k: v for k, v in os.environ.items() if not k.startswith("REEF_") and k != "PYTHONPATH"
        },
        log_dir=workdir,
        name="reef-infra",
        cwd=workdir,
    )
    return proc, listening(proc, port)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=5, help="wrk duration per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of every measurement")
    parser.add_argument("--baseline", help="git ref to serve beside the work tree (e.g. HEAD)")
    parser.add_argument("--kafka-bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--otlp-endpoint", default=LOCAL_OTLP, help="OTLP/HTTP receiver")
    parser.add_argument(
        "--only-otel",
        action="store_true",
        help="measure direct, reef-embedded and reef-embedded+otel only",
    )
    parser.add_argument("--litellm", help="path of a litellm executable (optional)")
    parser.add_argument(
        "--reef-infra", help="path of the existing Reef's `reef` executable (optional)"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="also serve the work tree with --workers N"
    )
    parser.add_argument("--workloads", default="small,agent", help="comma-separated: small, agent")
    parser.add_argument(
        "--large-mb", default="", help="also the agent request grown to these sizes (MB)"
    )
    parser.add_argument("--no-stream", action="store_true", help="buffered requests only")
    args = parser.parse_args()
    names = [n for n in args.workloads.split(",") if n]
    sizes = [float(mb) for mb in args.large_mb.split(",") if mb]
    loads = workloads(names, sizes, stream=not args.no_stream)
    print("request bodies: " + ", ".join(f"{w.name} {len(w.body):,} B" for w in loads))
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is required: apt-get install wrk")
    workdir = Path(tempfile.mkdtemp(prefix="reef-bench-"))
    procs: list[ManagedProcess] = []
    with running_upstream(workdir) as upstream:
        targets = [Target("direct", f"{upstream.v1_url}/chat/completions", {}, v1=upstream.v1_url)]
        kafka = args.kafka_bootstrap if kafka_answers(args.kafka_bootstrap) else None
        if args.only_otel:
            kafka = None
        elif kafka is None:
            print(f"(no Kafka at {args.kafka_bootstrap}: skipping the Kafka targets)")
        otlp = args.otlp_endpoint if answers(args.otlp_endpoint) else None
        if otlp is None:
            print(f"(no OTLP receiver at {args.otlp_endpoint}: skipping reef-embedded+otel)")
        # (name suffix, git tree or None for the work tree, API processes)
        trees: list[tuple[str, Path | None, int]] = [("", None, 1)]
        if args.workers > 1 and not args.only_otel:
            trees.append((f" x{args.workers}", None, args.workers))
        if args.baseline:
            trees.append((f"@{args.baseline}", export_tree(args.baseline), 1))
        try:
            for suffix, tree, workers in trees:
                for log, bootstrap in (("embedded", None), ("kafka", kafka)):
                    if log == "kafka" and bootstrap is None:
                        continue
                    reef = start_target(
                        f"reef-{log}{suffix}",
                        upstream.v1_url,
                        token=TOKEN,
                        workdir=workdir,
                        tree=tree,
                        kafka_bootstrap=bootstrap,
                        workers=workers,
                    )
                    url = f"{reef.base_url}/v1/chat/completions"
                    v1 = f"{reef.base_url}/v1"
                    targets.append(Target(reef.name, url, reef.headers, reef, v1))
            if otlp is not None:
                targets.append(start_traced(upstream.v1_url, otlp, workdir))
            if args.litellm:
                proc, url = start_litellm(args.litellm, upstream.v1_url, workdir)
                procs.append(proc)
                targets.append(Target("litellm", url, {"Authorization": f"Bearer {LITELLM_KEY}"}))
            if args.reef_infra:
                proc, url = start_reef_infra(args.reef_infra, upstream.base_url, workdir)
                procs.append(proc)
                headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": "bench"}
                targets.append(Target("reef-infra", url, headers))
            results, timings = measure(
                targets, loads, args.rounds, args.seconds, upstream, stream=not args.no_stream
            )
            durability = {t.name: check_durability(t, workdir) for t in targets if t.reef}
        finally:
            for target in targets:
                if target.reef is not None:
                    target.reef.stop()
            for proc in procs:
                proc.stop()
    print_table(results, args.rounds)
    print_ratio(results)
    if timings:
        print_streaming(timings)
    print("\ndurability (receipts handed out over 1 s buffered + 1 s streamed at 16 connections,")
    print("then looked up in the log read back after the server stopped):")
    for name, (given, found, errors) in durability.items():
        print(f"  {name:22} {found}/{given} receipts in the log, {errors} error replies")


def measure(
    targets: list[Target],
    loads: list[Workload],
    rounds: int,
    seconds: int,
    upstream: UpstreamProcess,
    *,
    stream: bool,
) -> tuple[list[Result], dict[str, list[StreamTiming]]]:
    """Every target in every workload and mode, ``rounds`` times, interleaved (noise hits
    all alike). The stand-in forgets its requests after each large run (it keeps the
    recent ones for tests)."""
    results: list[Result] = []
    timings: dict[str, list[StreamTiming]] = defaultdict(list)
    for _ in range(rounds):
        for load in loads:
            for mode in load.streams:
                for connections in load.connections:
                    for target in targets:
                        if load.url(target) is None:
                            continue
                        results.append(run_wrk(target, load, mode, connections, seconds))
                        if len(load.body) > 1_000_000:
                            upstream.clear()
        if not stream or not any(load.name == "small" for load in loads):
            continue
        for target in targets:
            body = {**BODY, "stream": True}
            timings[target.name].append(probe(target.url, target.headers, body, seconds))
    return results, timings


def check_durability(target: Target, workdir: Path) -> tuple[int, int, int]:
    """(receipts given, of them in the log, non-200 replies) over a short loaded run."""
    assert target.reef is not None
    receipts_path = workdir / f"{target.name}.receipts"
    extra = f"RECEIPTS = {json.dumps(str(receipts_path))}\n{RECEIPT_LUA}"
    for stream in (False, True):
        wrk(target, small_body(stream), 16, 1, extra)
    target.reef.stop()
    lines = receipts_path.read_text().split("\n")[:-1]
    given = {receipt for status, receipt in (line.split() for line in lines) if status == "200"}
    errors = sum(1 for line in lines if not line.startswith("200 "))
    given.discard("-")
    return len(given), len(given & logged_receipts(target.reef)), errors


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def added_p50(results: list[Result], name: str, workload: str, connections: int) -> list[float]:
    """``name``'s p50 minus direct's, per round, buffered."""
    direct = {(r.workload, r.mode, r.connections, i): r for i, r in _numbered(results, "direct")}
    return [
        r.p50_ms - direct[(workload, r.mode, connections, i)].p50_ms
        for i, r in _numbered(results, name)
        if r.workload == workload and r.mode == "buffered" and r.connections == connections
    ]


def print_ratio(results: list[Result]) -> None:
    """Agent-sized against small, per Reef: added p50 and req/s, medians over the rounds."""
    if not {"small", "agent"} <= {r.workload for r in results}:
        return
    print("\nagent/small (buffered; medians over the rounds)")
    print(f"{'target':22} {'conns':>5} {'added p50 ratio':>16} {'req/s ratio':>12}")
    agents = {r.target for r in results if r.workload == "agent"}
    for name in dict.fromkeys(r.target for r in results if r.target in agents - {"direct"}):
        for connections in (1, 16):
            added = [
                statistics.median(added_p50(results, name, w, connections))
                for w in ("small", "agent")
            ]
            rps = [
                statistics.median(
                    r.rps
                    for r in results
                    if r.target == name
                    and r.workload == w
                    and r.mode == "buffered"
                    and r.connections == connections
                )
                for w in ("small", "agent")
            ]
            ratio = f"{added[1] / added[0]:.2f}" if added[0] > 0 else "-"
            print(f"{name:22} {connections:>5} {ratio:>16} {rps[1] / rps[0]:>12.2f}")


def print_table(results: list[Result], rounds: int) -> None:
    """Medians over the rounds (min-max); "added" is per round, against direct's."""
    direct = {(r.workload, r.mode, r.connections, i): r for i, r in _numbered(results, "direct")}
    names = list(dict.fromkeys(r.target for r in results))
    print(f"\nmedian (min-max) over {rounds} rounds")
    print(
        f"{'target':22} {'workload':12} {'mode':9} {'conns':>5} {'added p50 ms':>20} "
        f"{'added p99 ms':>22} {'req/s':>18} {'server CPU ms/reply':>22}"
    )
    kinds = dict.fromkeys((r.workload, r.mode, r.connections) for r in results)
    for workload, mode, connections in kinds:
        for name in names:
            rows = [
                (i, r)
                for i, r in _numbered(results, name)
                if r.workload == workload and r.mode == mode and r.connections == connections
            ]
            if not rows:
                continue
            base = [direct[(workload, mode, connections, i)] for i, _ in rows]
            p50 = [r.p50_ms - b.p50_ms for (_, r), b in zip(rows, base, strict=True)]
            p99 = [r.p99_ms - b.p99_ms for (_, r), b in zip(rows, base, strict=True)]
            if name == "direct":
                p50 = [r.p50_ms for _, r in rows]
                p99 = [r.p99_ms for _, r in rows]
            rps = [r.rps for _, r in rows]
            cpu = [r.cpu_ms for _, r in rows if r.cpu_ms is not None]
            label = f"{name}{' (absolute)' if name == 'direct' else ''}"
            print(
                f"{label:22} {workload:12} {mode:9} {connections:>5} {_spread(p50):>20} "
                f"{_spread(p99):>22} {_spread(rps, '{:.0f}'):>18} "
                f"{_spread(cpu, '{:.2f}') if cpu else '-':>22}"
            )


def _numbered(results: list[Result], name: str) -> list[tuple[int, Result]]:
    """``name``'s results, each numbered by round within its (workload, mode, connections)."""
    seen: dict[tuple[str, str, int], int] = defaultdict(int)
    out = []
    for r in results:
        if r.target == name:
            kind = (r.workload, r.mode, r.connections)
            out.append((seen[kind], r))
            seen[kind] += 1
    return out


def print_streaming(timings: dict[str, list[StreamTiming]]) -> None:
    """Added time to first byte and per SSE event, one connection (bench/proxy_ttfb.py)."""
    direct = timings["direct"]
    print("\nstreaming, one connection: median (min-max) over the rounds")
    print(
        f"{'target':22} {'TTFB p50 ms':>18} {'added TTFB p50':>20} {'added TTFB p99':>20} "
        f"{'added per event ms':>22}"
    )
    for name, runs in timings.items():
        added = [r.ttfb_p50_ms - d.ttfb_p50_ms for r, d in zip(runs, direct, strict=True)]
        added99 = [r.ttfb_p99_ms - d.ttfb_p99_ms for r, d in zip(runs, direct, strict=True)]
        per_event = [
            ((r.total_p50_ms - r.ttfb_p50_ms) - (d.total_p50_ms - d.ttfb_p50_ms)) / max(1, r.frames)
            for r, d in zip(runs, direct, strict=True)
        ]
        print(
            f"{name:22} {_spread([r.ttfb_p50_ms for r in runs]):>18} {_spread(added):>20} "
            f"{_spread(added99):>20} {_spread(per_event, '{:.3f}'):>22}"
        )


if __name__ == "__main__":
    main()
