"""Requests stored as blocks (the default body format) across a ``reef serve`` restart.

Which blocks a session already stored is known only to the serving process: after a
restart, the first request of a continued session introduces its blocks again, and the
records written before the restart keep referencing the packs they were written with.
Every record of the session, from before and after the restart, reads back byte for byte
through the API and through a reader on the log given the server's artifact store; a
reader given no artifact store reports each one unreadable, never as a record without a
request.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import httpx

from reef.core.events import InferenceRecorded
from reef.core.topics import INFERENCE
from reef.log.embedded import EmbeddedLog
from reef.services.eventstore import StoredEvent
from reef.testing.servers import ReefProcess, UpstreamProcess, running_reef
from reef.wiring import readable_store
from reef_dev.agent_session import AgentSession
from tests.support.api import unique_scenario

TURNS_PER_RUN = 3


def agent_turns(
    served: ReefProcess, token: str, scenario: str, session: AgentSession, start: int
) -> dict[str, bytes]:
    """Post the session's next turns; their receipts and the bytes each request sent."""
    headers = {
        "Authorization": f"Bearer {token}",
        "x-reef-scenario": scenario,
        "content-type": "application/json",
    }
    sent: dict[str, bytes] = {}
    with httpx.Client(base_url=served.base_url, headers=headers, timeout=60.0) as client:
        for turn in range(start, start + TURNS_PER_RUN):
            body = {**session.request(), "stream": False}  # buffered: receipt in a header
            raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            response = client.post("/v1/messages", content=raw)
            assert response.status_code == 200, response.text
            sent[response.headers["x-reef-agent-record-id"]] = raw
            session.respond(turn)
    return sent


def read_log(state: Path, served: ReefProcess | None) -> list[StoredEvent]:
    """The log's exchanges, read with the server's artifact store (None: without one)."""

    async def read() -> list[StoredEvent]:
        log = EmbeddedLog(state / "log.sqlite3")
        try:
            claims = served.claims() if served is not None else None
            async with readable_store(log, claims) as store:
                return [s async for s in store.read(INFERENCE)]
        finally:
            await log.close()

    found: list[StoredEvent] = asyncio.run(read())
    return found


def test_a_session_continued_after_a_restart_reads_back_whole(
    upstream: UpstreamProcess, tmp_path: Path
) -> None:
    token = f"adm-{secrets.token_hex(8)}"
    env = {"REEF_TOKEN": token, "REEF_UPSTREAM_API_KEY": "sk-up-restart"}
    state = tmp_path / "state"
    scenario = unique_scenario("restart")
    session = AgentSession()
    args = ["--upstream-url", upstream.v1_url]
    with running_reef(args, env=env, state_dir=state) as before:
        sent = agent_turns(before, token, scenario, session, 0)
    with running_reef(args, env=env, state_dir=state) as after:
        sent |= agent_turns(after, token, scenario, session, TURNS_PER_RUN)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=after.base_url, headers=headers, timeout=60.0) as client:
            for receipt, raw in sent.items():
                got = client.get(f"/reef/scenarios/{scenario}/records/{receipt}")
                assert got.status_code == 200, got.text
                view = got.json()
                assert not view.get("partly_erased") and view["request"] == json.loads(raw)
        stored = read_log(state, after)
    exchanges = {
        s.event.event_id: s.event for s in stored if isinstance(s.event, InferenceRecorded)
    }
    assert all(s.event is not None for s in stored), [s.error for s in stored]
    assert len(exchanges) == 2 * TURNS_PER_RUN
    for receipt, raw in sent.items():
        request = exchanges[receipt].request_json
        assert request is not None and request.encode() == raw  # byte for byte

    bare = read_log(state, None)
    assert len(bare) == 2 * TURNS_PER_RUN
    assert all(s.event is None and "artifact store" in (s.error or "") for s in bare)
