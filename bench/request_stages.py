"""Reef's own work on one request, stage by stage, in process (no HTTP server, no load).

The app ``reef serve`` builds (:func:`reef.wiring.create_app`, API role, embedded log)
runs in this process over ``httpx.ASGITransport``; the scripted upstream runs in its own
process. Each stage is wrapped and timed in CPU time of this thread (``time.thread_time``),
so a machine shared with other work inflates the figures less than wall time would;
whole-request rows (``_serve``) count whatever else the event loop ran meanwhile. The
same request is sent over and over, as ``bench/proxy_overhead.py`` sends it: ``small``,
``agent`` and ``2mb`` are that program's bodies. ``turns`` alternates the agent request
and its next turn (the answer's tool call and its result appended, the cache breakpoint
moved to the newest message), so each request differs from the one before it as an
agent's next request does.

``--tree PATH`` times another checkout's code (e.g. ``git archive REF`` unpacked) with
this program: its ``reef`` is imported instead of the work tree's.

    .venv/bin/python bench/request_stages.py [--requests 100] [--workloads small,agent,turns,2mb]
        [--tree /tmp/reef-at-ref]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

#: (module, attribute, label): the stages timed, where the code has them
STAGES = [
    ("reef.api.inference", "decoded_object", "decode + parse + checks"),
    ("reef.api.rereading", "RecentRequests.read", "read the body (what is new, or whole)"),
    ("reef.api.rereading", "decoded_object", "  of which read whole"),
    ("reef.crypto.blocks", "split", "blocks: split (lay out)"),
    ("reef.crypto.blocks", "rebuilds", "blocks: rebuild check"),
    ("reef.crypto.blocks", "digest", "blocks: hashing (each call)"),
    ("reef.services.bodystore", "BodyStore._plan", "body store plan (split, address, pack)"),
    ("reef.services.bodystore", "BodyStore._sealed", "seal (manifest, answer, response)"),
    ("reef.services.eventstore", "EventStore.append_all", "seal + log append (embedded)"),
    ("reef.api.inference", "_serve", "whole request (_serve)"),
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100, help="timed requests per workload")
    parser.add_argument("--workloads", default="small,agent,turns,2mb")
    parser.add_argument("--tree", type=Path, help="a checkout whose reef is timed instead")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(args.tree or root))
    times: dict[str, list[float]] = defaultdict(list)
    for module, name, label in STAGES:
        _wrap(module, name, functools.partial(_record, times[label]))
    from reef.testing.servers import running_upstream

    with running_upstream() as upstream:
        asyncio.run(_run(upstream.v1_url, args.workloads.split(","), args.requests, times))


def _record(into: list[float], seconds: float) -> None:
    into.append(seconds)


def _wrap(module_name: str, name: str, record: Callable[[float], None]) -> None:
    module = __import__(module_name, fromlist=["_"])
    owner: ModuleType | type = module
    if "." in name:
        klass, name = name.split(".")
        owner = getattr(module, klass)
    original = getattr(owner, name, None)
    if original is None:
        return
    if asyncio.iscoroutinefunction(original):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return await original(*args, **kwargs)
            finally:
                record(time.thread_time() - started)

        setattr(owner, name, functools.wraps(original)(timed_async))
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            record(time.thread_time() - started)

    setattr(owner, name, functools.wraps(original)(timed))


async def _run(
    upstream: str, names: list[str], requests: int, times: dict[str, list[float]]
) -> None:
    import httpx

    from bench.proxy_overhead import BODY, agent_request, grown_request
    from reef.settings import Settings
    from reef.wiring import create_app

    bodies = {
        "small": ("/v1/chat/completions", [json.dumps(BODY).encode()]),
        "agent": ("/v1/messages", [agent_request()]),
        "turns": ("/v1/messages", [agent_request(), next_turn(agent_request())]),
        "2mb": ("/v1/messages", [grown_request(2_000_000)]),
    }
    state = Path(tempfile.mkdtemp(prefix="reef-stages-"))
    settings = Settings.of(
        state_dir=state, upstream_url=upstream, insecure=True, serve_role="api", log="embedded"
    )
    app = create_app(settings)
    headers = {"x-reef-scenario": "bench", "content-type": "application/json"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reef") as client:
            for name in names:
                path, sent = bodies[name]
                count = requests if len(sent[0]) < 1_000_000 else max(5, requests // 10)
                for n in range(6 + count):
                    if n == 6:
                        for found in times.values():
                            found.clear()
                    body = sent[n % len(sent)]
                    answer = await client.post(path, content=body, headers=headers)
                    answer.raise_for_status()
                _print(name, len(sent[-1]), count, times)


def next_turn(raw: bytes) -> bytes:
    """The agent's next request after ``raw``: its answer (a tool call) and the tool's
    result appended, the cache breakpoint moved from the last message to the new one,
    written as the client wrote ``raw`` (compact, UTF-8)."""
    body = json.loads(raw)
    mark = body["messages"][-1]["content"][-1].pop("cache_control")
    call = {"file_path": "/tmp/notes.py", "content": "print('noted')\n" * 40}
    body["messages"] += [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Write", "input": call}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "File created"},
                {"type": "text", "text": "Go on.", "cache_control": mark},
            ],
        },
    ]
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _print(name: str, size: int, count: int, times: dict[str, list[float]]) -> None:
    print(f"{name} ({size:,} B, {count} requests): median CPU ms per call, calls per request")
    for label, found in times.items():
        if found:
            median = 1000 * statistics.median(found)
            print(f"  {label:42} {median:8.3f}  x{len(found) / count:g}")


if __name__ == "__main__":
    main()
