"""A canary between two releases, tried by the real coding agents through ``reef serve``
(embedded log, the package's rollouts deployment): each Claude Code and Codex session is
routed by the session id its CLI sends (``x-claude-code-session-id``, Codex's
``session-id``), so both model requests of a session (the tool call, then the answer
after its result) are served by one release, the one the draw over that id picks.

Claude Code takes its session id from ``--session-id``: the test picks ids the draw
sends to each arm, so both arms serve a session whatever ids Codex picks for itself.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from reef.core.agent_headers import SESSION_SOURCE_TAG
from reef.core.events import InferenceRecorded
from reef.core.routing import draw, routing_key, takes
from reef.core.topics import INFERENCE
from reef_dev import agent_clis
from tests.support import doc_pages
from tests.support.deployment import Deployment

ANSWER = "wrote hello.txt"
SESSIONS_PER_AGENT = 4
#: requests per session: the tool call, then the answer after the tool's result
REQUESTS = 2


@pytest.mark.parametrize("rollouts_dep", ["embedded"], indirect=True)
def test_each_agent_session_is_served_by_one_arm_of_a_canary(
    rollouts_dep: Deployment, tmp_path: Path
) -> None:
    dep = rollouts_dep
    scenario = dep.create_scenario("agent-canary")
    head: str = dep.head(scenario)["release_id"]
    content = dep.content.publish_files({"system_prompt.md": "the candidate harness"})
    candidate: str = dep.propose_training(scenario, content, pending=True)["release_id"]
    # docs/agents.md's canary, run as a reader would: its curl line in bash
    curl = doc_pages.as_reader(doc_pages.block("agents.md", "curl "), dep.base_url, scenario)
    started = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", curl.replace("<pending id>", candidate)],
        env={"PATH": os.environ["PATH"], "REEF_ADMIN_TOKEN": dep.admin_token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    rollout = json.loads(started.stdout)
    assert (rollout["share"], rollout["candidate_release_id"]) == (0.5, candidate)
    # no reports are sent, and fewer exchanges than it waits for: it never decides here
    assert rollout["min_exchanges"] > 2 * SESSIONS_PER_AGENT * REQUESTS
    rollout_id = rollout["rollout_id"]

    def arm_of(session: str) -> str:
        chosen = takes(rollout["share"], draw(scenario, rollout_id, routing_key(session, "")))
        return candidate if chosen else head

    claude_ids = claude_sessions(arm_of, head, candidate)
    runs = [
        claude_run(dep, scenario, s, tmp_path / f"claude-{n}") for n, s in enumerate(claude_ids)
    ]
    runs += [codex_run(dep, scenario, tmp_path / f"codex-{n}") for n in range(SESSIONS_PER_AGENT)]
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(run_agent, runs))
    assert all(ANSWER in out for out in outputs), outputs

    sessions = recorded_sessions(dep, scenario, 2 * SESSIONS_PER_AGENT * REQUESTS)
    by_agent: dict[str, set[str]] = defaultdict(set)
    for (agent, session), served in sessions.items():
        by_agent[agent].add(session)
        assert len(served) == REQUESTS, (agent, session, served)
        assert set(served) == {arm_of(session)}, (agent, session, served)
    assert by_agent["claude-code"] == set(claude_ids)
    assert len(by_agent["codex"]) == SESSIONS_PER_AGENT
    arms = {served[0] for served in sessions.values()}
    assert arms == {head, candidate}


def claude_sessions(arm_of: Callable[[str], str], head: str, candidate: str) -> list[str]:
    """Session ids (UUIDs, as ``--session-id`` wants) half of which the draw sends to
    each arm; seeded, so a run picks the same candidates in the same order."""
    rng = random.Random(7)
    wanted = {head: SESSIONS_PER_AGENT // 2, candidate: SESSIONS_PER_AGENT // 2}
    picked: list[str] = []
    while len(picked) < SESSIONS_PER_AGENT:
        session = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        arm = arm_of(session)
        if wanted[arm] > 0:
            wanted[arm] -= 1
            picked.append(session)
    return picked


def claude_run(dep: Deployment, scenario: str, session: str, home: Path) -> agent_clis.AgentRun:
    work = home / "work"
    work.mkdir(parents=True)
    arguments = {"file_path": str(work / "hello.txt"), "content": f"{session}\n"}
    run = agent_clis.claude_code(
        f"Call tool Write with {json.dumps(arguments)} Return exactly: {ANSWER}",
        base_url=dep.base_url,
        token=dep.admin_token,
        scenario=scenario,
        workdir=work,
        home=home / "home",
    )
    return replace(run, argv=[*run.argv, "--session-id", session])


def codex_run(dep: Deployment, scenario: str, home: Path) -> agent_clis.AgentRun:
    work = home / "work"
    work.mkdir(parents=True)
    arguments = {"cmd": f"printf '%s\\n' 'hello {uuid.uuid4().hex}' > hello.txt"}
    return agent_clis.codex(
        f"Call tool exec_command with {json.dumps(arguments)} Return exactly: {ANSWER}",
        v1_url=f"{dep.base_url}/v1",
        token=dep.admin_token,
        scenario=scenario,
        workdir=work,
        home=home / "home",
    )


def run_agent(run: agent_clis.AgentRun) -> str:
    result = run.run(timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def recorded_sessions(
    dep: Deployment, scenario: str, count: int
) -> dict[tuple[str, str], list[str]]:
    """(agent, session id) -> the release that served each of its recorded requests (the
    engine's word when it named one, else the release routed to)."""
    deadline = time.monotonic() + 30
    while True:
        records = [
            e
            for e in dep.events(INFERENCE)
            if isinstance(e, InferenceRecorded) and e.scenario == scenario
        ]
        if len(records) >= count or time.monotonic() > deadline:
            break
        dep.alive()
        time.sleep(0.2)
    assert len(records) == count, [(r.route, r.tags) for r in records]
    sessions: dict[tuple[str, str], list[str]] = defaultdict(list)
    for record in records:
        key = (record.tags[SESSION_SOURCE_TAG], record.tags["session"])
        sessions[key].append(record.served_release_id or record.release_id)
    return dict(sessions)
