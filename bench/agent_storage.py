"""What an agent session costs to store: the previous body format against the new ones.

    .venv/bin/python bench/agent_storage.py [--turns 50] [--rounds 3] [--markdown PATH]

One session shaped like Claude Code's: the system prompt and tool schemas of a captured
Claude Code request (``tests/fixtures/agents/claude_code``; generated ones of the same
size when the capture is absent), then per turn an assistant message (text and a tool
call) and the tool's result (20-60 lines of code), the whole context resent every turn
with the cache breakpoint on the newest message. Each turn is one ``InferenceRecorded``
appended through :class:`~reef.services.eventstore.EventStore` with a key ring (sealed,
its data key in the same append), one at a time, on a fresh embedded log and local
artifact store per format:

* ``plain``: the previous format (each body sealed whole, uncompressed);
* ``compressed``: each body compressed (zstd) and sealed whole;
* ``blocks``: the request as blocks shared within the session, compressed;
* ``blocks, prepared``: the same, the request handed to the store when it arrives
  (``EventStore.prepare_request``, as the API does) and appended after a 200 ms upstream,
  so its pack is stored while the upstream answers.

Bytes: what the agent sent (request bodies), the log's record values (``reef.inference``
and ``reef.keys``) and the artifact store's objects (claim-checked bodies, block packs).
Latency: each append (seal, store the pack, append durably), and opening the session's
last record back (assembly included). The formats alternate within each round so
machine load hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reef.artifacts.claimcheck import ClaimCheck
from reef.artifacts.local import LocalArtifactStore
from reef.core.events import InferenceRecorded, utc_now
from reef.core.topics import INFERENCE, KEYS, LOG_TOPICS
from reef.crypto.rings import TableKeyRing
from reef.log.embedded import EmbeddedLog
from reef.services.bodystore import BodyFormat
from reef.services.eventstore import EventStore
from reef_dev.agent_session import AgentSession
from reef_dev.events import inference

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "tests/fixtures/agents/claude_code/interactive/first_request.json"
FORMATS: tuple[str, ...] = ("plain", "compressed", "blocks", "blocks, prepared")
#: how long the upstream takes to answer, in the prepared variant (a short LLM answer)
UPSTREAM_S = 0.2
CLAIM_CHECK_BYTES = 256 * 1024  # the deployment default


@dataclass
class Run:
    sent: int = 0
    log_bytes: int = 0
    artifact_bytes: int = 0
    append_ms: list[float] = field(default_factory=list)
    open_ms: list[float] = field(default_factory=list)

    @property
    def stored(self) -> int:
        return self.log_bytes + self.artifact_bytes


def session_events(turns: int, seed: int) -> list[InferenceRecorded]:
    captured = json.loads(CAPTURE.read_text()) if CAPTURE.is_file() else None
    session = AgentSession(seed, captured=captured)
    events = []
    for turn in range(turns):
        request = session.body().decode()
        response = json.dumps(session.respond(turn), separators=(",", ":"))
        event = inference("bench", f"rec-{seed}-{turn:03d}", utc_now())
        events.append(
            replace(
                event,
                dialect="anthropic",
                route="/v1/messages",
                request_json=request,
                response_json=response,
                tags={"session": session.session_id},
            )
        )
    return events


async def one_session(events: list[InferenceRecorded], variant: str, work: Path) -> Run:
    log = EmbeddedLog(work / "log.sqlite3", partitions=1)
    await log.start()
    await log.ensure_topics(list(LOG_TOPICS))
    artifacts = work / "objects"
    store = EventStore(
        log,
        claims=ClaimCheck(LocalArtifactStore(artifacts), CLAIM_CHECK_BYTES),
        keys=TableKeyRing(log),
        body_format=_format(variant),
    )
    run = Run(sent=sum(len((e.request_json or "").encode()) for e in events))
    try:
        for event in events:
            if variant.endswith("prepared"):
                assert event.request_json is not None
                store.prepare_request(
                    event.scenario, event.event_id, event.tags, event.request_json
                )
                await asyncio.sleep(UPSTREAM_S)
            began = time.perf_counter()
            await store.append(event)
            run.append_ms.append((time.perf_counter() - began) * 1000)
        records = [r async for r in log.read(INFERENCE)]
        run.log_bytes = sum(len(r.value or b"") for r in records)
        run.log_bytes += sum([len(r.value or b"") async for r in log.read(KEYS)])
        run.artifact_bytes = sum(p.stat().st_size for p in artifacts.rglob("*") if p.is_file())
        for _ in range(5):
            # a reader that starts cold: no pack kept in memory from the writes
            reader = EventStore(
                log,
                claims=ClaimCheck(LocalArtifactStore(artifacts), CLAIM_CHECK_BYTES),
                keys=TableKeyRing(log),
            )
            began = time.perf_counter()
            opened = await reader.open(reader.decode(records[-1]))
            run.open_ms.append((time.perf_counter() - began) * 1000)
            assert isinstance(opened.event, InferenceRecorded)
            assert opened.event.request_json == events[-1].request_json, "not byte-exact"
    finally:
        await log.close()
    return run


async def measure(turns: int, rounds: int) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {f: [] for f in FORMATS}
    for n in range(rounds):
        events = session_events(turns, seed=n + 1)
        order = FORMATS[n % len(FORMATS) :] + FORMATS[: n % len(FORMATS)]
        for body_format in order:
            with tempfile.TemporaryDirectory(prefix="reef-agent-storage-") as work:
                out[body_format].append(await one_session(events, body_format, Path(work)))
    return out


def _format(variant: str) -> BodyFormat:
    return "blocks" if variant.startswith("blocks") else variant  # type: ignore[return-value]


def object_writes(count: int = 50) -> list[float]:
    """Milliseconds of one durable 2 KB object write to the local artifact store (what
    storing a pack adds to an append: the file and its directory synced)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="reef-agent-storage-") as work:
        store = LocalArtifactStore(Path(work))
        for _ in range(count):
            data = os.urandom(2048)
            began = time.perf_counter()
            store.put_bytes(data)
            out.append((time.perf_counter() - began) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(results: dict[str, list[Run]]) -> str:
    rows = [
        "| format | sent by the agent | on the log | in the artifact store | stored "
        "| stored / sent | append p50 | append p95 | open last record p50 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for body_format, runs in results.items():
        first = runs[0]  # the same session bytes every round: sizes vary with the seed
        appends = [ms for r in runs for ms in r.append_ms]
        opens = [ms for r in runs for ms in r.open_ms]
        rows.append(
            f"| {body_format} | {_kb(first.sent)} | {_kb(first.log_bytes)} "
            f"| {_kb(first.artifact_bytes)} | {_kb(first.stored)} "
            f"| 1/{first.sent / first.stored:.1f} | {statistics.median(appends):.2f} ms "
            f"| {pct(appends, 0.95):.2f} ms | {statistics.median(opens):.2f} ms |"
        )
    return "\n".join(rows)


def _kb(n: int) -> str:
    return f"{n / 1000:,.1f} KB"


def markdown(args: argparse.Namespace, text: str) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    source = "captured Claude Code system + tools" if CAPTURE.is_file() else "generated"
    return "\n".join(
        [
            "# Agent session storage",
            "",
            f"`.venv/bin/python bench/agent_storage.py --turns {args.turns} "
            f"--rounds {args.rounds}` at commit `{commit}`, "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, on {platform.node()} "
            f"({platform.machine()}, {_cpus()} CPUs, Python {platform.python_version()}); "
            f"{source}. Sizes are of the first round's session; latencies pool every round "
            f"({args.rounds} x {args.turns} appends, 5 cold opens per round and format). "
            "`plain` is the format before compression; `compressed` stores each body "
            "whole; `blocks` (the default, `REEF_BODY_FORMAT`) shares a session's "
            "repeated context ([storage](../storage.md)).",
            "",
            text,
            "",
        ]
    )


def _cpus() -> int:
    return os.cpu_count() or 0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.turns, args.rounds))
    writes = object_writes()
    text = table(results) + (
        f"\n\nOne durable object write to the local artifact store (a 2 KB pack: the file "
        f"and its directory synced), measured after: p50 {statistics.median(writes):.2f} ms, "
        f"p95 {pct(writes, 0.95):.2f} ms."
    )
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(markdown(args, text))
    return {f: [r.stored for r in runs] for f, runs in results.items()}


if __name__ == "__main__":
    main()
