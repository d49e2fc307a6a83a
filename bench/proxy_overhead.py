"""Proxy overhead: direct calls vs calls through Reef, measured in one run.

Every target fronts the SAME scripted upstream (reef/testing/scripted_upstream.py, raw
ASGI on uvicorn). Load comes from ``wrk`` (Debian package ``wrk``), which measures the
server rather than a Python client:

- latency: one connection, sequential requests → p50/p99; "added" is the target's p50/p99
  minus the direct p50/p99 measured in the same run;
- throughput: 16 connections → sustained requests/s.

Buffered and streaming (``"stream": true``, SSE read to the end) bodies are measured.
Targets: direct, Reef on the embedded log, Reef on Kafka (``--kafka-bootstrap``, default:
the local stack's single node if it answers), and a LiteLLM proxy if ``--litellm`` names
an executable (``litellm`` from PyPI, installed in its own venv; see bench/README.md).

    .venv/bin/python bench/proxy_overhead.py [--seconds 8] [--kafka-bootstrap 127.0.0.1:19092]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reef.testing.servers import (
    ManagedProcess,
    free_port,
    reef_executable,
    running_upstream,
    spawn,
    start_reef,
)

TOKEN = "bench-token"
#: LiteLLM refuses to start without a master key; authenticated like Reef, so it is fair
LITELLM_KEY = "sk-bench-0123456789abcdef0123456789abcdef"
BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "Return exactly: reef is ready"}],
}


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]


@dataclass
class Result:
    target: str
    mode: str
    connections: int
    p50_ms: float
    p99_ms: float
    rps: float


def lua_script(headers: dict[str, str], body: dict[str, object]) -> Path:
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(body))}"]
    lines.append('wrk.headers["Content-Type"] = "application/json"')
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    path = Path(tempfile.mkstemp(suffix=".lua")[1])
    path.write_text("\n".join(lines) + "\n")
    return path


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * _UNITS[unit]


def run_wrk(target: Target, stream: bool, connections: int, seconds: int) -> Result:
    script = lua_script(target.headers, {**BODY, "stream": stream})
    out = subprocess.run(
        [
            "wrk",
            "-t1" if connections == 1 else "-t2",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            target.url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    script.unlink()
    distribution = out.split("Latency Distribution", 1)[1]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", distribution, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", distribution, re.M).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"{target.name}: {errors.group(1)} error responses\n{out}")
    return Result(target.name, "stream" if stream else "buffered", connections, p50, p99, rps)


def kafka_answers(bootstrap: str) -> bool:
    host, _, port = bootstrap.partition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


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
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}/v1/chat/completions"
        except OSError:
            time.sleep(0.5)
    proc.stop()
    raise SystemExit(f"litellm did not start\n{proc.output()}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=8, help="wrk duration per measurement")
    parser.add_argument("--kafka-bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--litellm", help="path of a litellm executable (optional)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is required: apt-get install wrk")
    workdir = Path(tempfile.mkdtemp(prefix="reef-bench-"))
    procs: list[ManagedProcess] = []
    with running_upstream(workdir) as upstream:
        env = {"REEF_TOKEN": TOKEN}
        reef_headers = {"Authorization": f"Bearer {TOKEN}", "x-reef-scenario": "bench"}
        targets = [Target("direct", f"{upstream.v1_url}/chat/completions", {})]
        embedded = start_reef(
            ["--upstream-url", upstream.v1_url],
            env=env,
            state_dir=workdir / "embedded",
            name="reef-embedded",
        )
        targets.append(
            Target("reef-embedded", f"{embedded.base_url}/v1/chat/completions", reef_headers)
        )
        kafka = None
        if kafka_answers(args.kafka_bootstrap):
            prefix = f"bench-{uuid.uuid4().hex[:8]}."
            subprocess.run(
                [
                    reef_executable(),
                    "topics",
                    "create",
                    "--log",
                    "kafka",
                    "--kafka-bootstrap",
                    args.kafka_bootstrap,
                    "--kafka-topic-prefix",
                    prefix,
                ],
                check=True,
                capture_output=True,
            )
            kafka = start_reef(
                [
                    "--upstream-url",
                    upstream.v1_url,
                    "--log",
                    "kafka",
                    "--kafka-bootstrap",
                    args.kafka_bootstrap,
                    "--kafka-topic-prefix",
                    prefix,
                ],
                env=env,
                state_dir=workdir / "kafka",
                name="reef-kafka",
            )
            targets.append(
                Target("reef-kafka", f"{kafka.base_url}/v1/chat/completions", reef_headers)
            )
        else:
            print(f"(no Kafka at {args.kafka_bootstrap}: skipping the Kafka target)")
        if args.litellm:
            proc, url = start_litellm(args.litellm, upstream.v1_url, workdir)
            procs.append(proc)
            targets.append(Target("litellm", url, {"Authorization": f"Bearer {LITELLM_KEY}"}))
        try:
            results = []
            for stream in (False, True):
                for target in targets:
                    for connections in (1, 16):
                        results.append(run_wrk(target, stream, connections, args.seconds))
        finally:
            embedded.stop()
            if kafka is not None:
                kafka.stop()
            for proc in procs:
                proc.stop()
    print_table(results)


def print_table(results: list[Result]) -> None:
    base = {(r.mode, r.connections): r for r in results if r.target == "direct"}
    print(
        f"{'target':15} {'mode':9} {'conns':>5} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'added p50':>10} {'added p99':>10} {'req/s':>9}"
    )
    for r in results:
        ref = base[(r.mode, r.connections)]
        print(
            f"{r.target:15} {r.mode:9} {r.connections:>5} {r.p50_ms:8.2f} {r.p99_ms:8.2f} "
            f"{r.p50_ms - ref.p50_ms:10.2f} {r.p99_ms - ref.p99_ms:10.2f} {r.rps:9.0f}"
        )


if __name__ == "__main__":
    main()
