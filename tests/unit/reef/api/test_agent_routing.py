"""An agent session keeps one arm of a canary: the API routes on the session the agent CLI
names in its own headers (reef.api.tags, then reef.api.inference.routed), so every
request of a Claude Code or Codex session draws with the key ``session:<its id>``, the
receipt never enters the draw, and a client's explicit ``x-reef-tag-session`` wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reef.api.inference import routed
from reef.api.tags import tags_from
from reef.core.events import ScenarioCreated
from reef.core.routing import Route, route, routing_key
from reef.services.projection import ApiState
from tests.support.rollouts import at, committed, started

AGENTS = Path(__file__).resolve().parents[3] / "fixtures" / "agents"
#: each CLI's two requests of one captured session: the tool call, then its result
CAPTURED = {
    "claude-code": AGENTS / "claude_code" / "quiet",
    "codex": AGENTS / "codex" / "exec",
}
SESSION_HEADER = {"claude-code": "x-claude-code-session-id", "codex": "session-id"}
BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def canary(scenario: str = "shop", share: float = 0.5) -> ApiState:
    """A scenario with head ``h0`` and an active canary of the held ``c1``."""
    state = ApiState()
    events = [
        ScenarioCreated(
            event_id=f"created-{scenario}",
            scenario=scenario,
            occurred_at=at(0),
            producer="test",
            recipe="core",
            initial_release_id="h0",
        ),
        committed(scenario, "h0", operation="creation"),
        committed(scenario, "c1", pending=True, seconds=1),
        started(scenario, "r1", "c1", "h0", share=share, seconds=2),
    ]
    for event in events:
        state.apply(event)
    return state


def route_of(state: ApiState, headers: dict[str, str], receipt: str) -> Route:
    """The route the API gives a request with these headers (lowercase names), the
    client's ``x-reef-tag-*`` headers read as explicit tags."""
    explicit = {
        name.removeprefix("x-reef-tag-"): value
        for name, value in headers.items()
        if name.startswith("x-reef-tag-")
    }
    tags = tags_from(headers, explicit, BODY, agent_sessions=True, classify=False)
    return routed(state, "shop", tags, receipt)


def expected(state: ApiState, key: str) -> Route:
    found = route("shop", key, state.rollouts)
    assert found is not None
    return found


def captured_headers(folder: Path, name: str) -> dict[str, str]:
    head = json.loads((folder / f"{name}.headers.json").read_text())
    return {k.lower(): v for k, v in head["headers"]}


def receipts_of_both_arms(state: ApiState) -> tuple[str, str]:
    """Two receipts an untagged exchange would route to different arms."""
    by_arm: dict[str, str] = {}
    for n in range(64):
        by_arm.setdefault(expected(state, routing_key(None, f"rec-{n}")).arm, f"rec-{n}")
    return by_arm["head"], by_arm["candidate"]


@pytest.mark.parametrize("agent", sorted(CAPTURED))
def test_a_captured_agent_session_routes_on_its_own_id(agent: str) -> None:
    state = canary()
    folder = CAPTURED[agent]
    first, second = (captured_headers(folder, n) for n in ("first_request", "tool_result_request"))
    session = first[SESSION_HEADER[agent]]
    assert second[SESSION_HEADER[agent]] == session
    wanted = expected(state, routing_key(session, "unused"))
    assert wanted.rollout_id == "r1"
    # whatever arm each request's own receipt would draw, the session's arm answers both
    for receipt in receipts_of_both_arms(state):
        assert route_of(state, first, receipt) == wanted
        assert route_of(state, second, receipt) == wanted


@pytest.mark.parametrize("header", ["x-claude-code-session-id", "session-id", "session_id"])
def test_the_routing_key_of_an_agent_session_header_alone_is_session_and_its_id(
    header: str,
) -> None:
    state = canary()
    head_receipt, candidate_receipt = receipts_of_both_arms(state)
    arms = set()
    for n in range(32):
        session = f"5f35df9b-42d5-43c6-9589-{n:012x}"
        wanted = expected(state, f"session:{session}")
        arms.add(wanted.arm)
        for receipt in (head_receipt, candidate_receipt):
            assert route_of(state, {header: session}, receipt) == wanted
    assert arms == {"head", "candidate"}  # the ids above reach both arms


def test_codex_turn_metadata_alone_names_the_session_routed_on() -> None:
    state = canary()
    metadata = json.dumps({"session_id": "01a23c24-e123-7c11-a94d-00beeca2a7f2"})
    wanted = expected(state, "session:01a23c24-e123-7c11-a94d-00beeca2a7f2")
    for receipt in receipts_of_both_arms(state):
        assert route_of(state, {"x-codex-turn-metadata": metadata}, receipt) == wanted


def test_an_explicit_session_tag_wins_over_the_agents() -> None:
    state = canary()
    mine = "client-session"
    agent_ids = [f"agent-{n}" for n in range(32)]
    # agent sessions on both arms, so following the agent's id would show
    assert {expected(state, routing_key(a, "")).arm for a in agent_ids} == {"head", "candidate"}
    wanted = expected(state, routing_key(mine, ""))
    for agent in agent_ids:
        for header in ("x-claude-code-session-id", "session-id"):
            headers = {header: agent, "x-reef-tag-session": mine}
            assert route_of(state, headers, "rec-0") == wanted


def test_without_a_session_each_exchange_draws_on_its_receipt() -> None:
    state = canary()
    head_receipt, candidate_receipt = receipts_of_both_arms(state)
    assert route_of(state, {}, head_receipt).arm == "head"
    assert route_of(state, {}, candidate_receipt).arm == "candidate"
