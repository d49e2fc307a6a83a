"""The session processor on sessions an agent CLI named (pure, DictState): the agent's
own conversation across a compaction, its subagents' conversations linked to the turn
that spawned them, side calls, named threads, and replay.

The exchanges are shaped like Claude Code's and Codex's (a system prompt first, the tags
the API derives from their session headers: reef.core.agent_headers); the CLIs are not
driven to compact or to spawn a subagent here, so these conversations are built to the
shape the agents send (a summary request on the conversation's prefix, then a shortened
history under the same system prompt; a subagent's own system prompt and task).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.core.events import Event, InferenceRecorded, SessionExpired, TurnCompleted
from reef.core.sessions import SessionProcessor, SessionSettings
from reef.core.state import DictState
from tests.support.sessions import assistant, at, exchange, fresh, tool, user

CLAUDE = {"session": "cc-7f3a", "session-source": "claude-code"}
COMPACTION = CLAUDE | {"turn-type": "side", "side-kind": "compaction"}
MAIN_SYSTEM = {"role": "system", "content": "You are Claude Code, Anthropic's official CLI."}
EXPLORE = {"role": "system", "content": "You are a file search specialist for Claude Code."}


def completed(events: list[Event]) -> TurnCompleted:
    assert len(events) == 1 and isinstance(events[0], TurnCompleted), events
    return events[0]


def turn(
    rec: str, at: float, messages: list[dict[str, Any]], answer: str, **kw: Any
) -> InferenceRecorded:
    """An exchange in the Claude Code session ``CLAUDE`` (unless ``tags`` says otherwise)."""
    kw.setdefault("tags", CLAUDE)
    return exchange(rec, at, messages, answer, **kw)


M1 = [MAIN_SYSTEM, user("fix the failing test")]
M2 = [*M1, assistant("running the tests"), tool("1 failed")]


def test_an_agents_turns_bind_in_its_conversations_order() -> None:
    proc, state = fresh()
    assert proc.step(state, turn("m1", 0, M1, "running the tests")) == []
    done = completed(proc.step(state, turn("m2", 1, M2, "reading the test")))
    assert (done.receipt_id, done.next_receipt_id, done.session_id) == ("m1", "m2", "m1")
    assert (done.matched_by, done.session_tag, done.next_state_role) == ("tag", "cc-7f3a", "tool")
    assert done.parent_session_id is None and done.parent_receipt_id is None
    assert proc.step(state, turn("m2-again", 2, M2, "reading it")) == []
    assert state.get("fate/m2-again") == "retry"


def test_a_compaction_is_a_side_call_and_the_shortened_history_goes_on_in_the_session() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "running the tests"))
    proc.step(state, turn("m2", 1, M2, "reading the test"))
    summary_ask = [*M2, assistant("reading the test"), user("summarise the conversation")]
    assert proc.step(state, turn("c1", 2, summary_ask, "the summary", tags=COMPACTION)) == []
    assert state.get("fate/c1") == {"side": "compaction"}
    shortened = [MAIN_SYSTEM, user("This session continues: the summary"), user("go on")]
    done = completed(proc.step(state, turn("m3", 3, shortened, "editing the test")))
    assert (done.receipt_id, done.next_receipt_id, done.turn_index) == ("m2", "m3", 1)
    after = [*shortened, assistant("editing the test"), tool("edited")]
    assert completed(proc.step(state, turn("m4", 4, after, "done"))).receipt_id == "m3"
    assert state.get("open/demo")["count"] == 1


def test_a_compacted_history_under_a_changed_system_prompt_stays_when_it_says_so() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "running the tests"))
    refreshed = {"role": "system", "content": "You are Claude Code. Today is another day."}
    shortened = [refreshed, user("This session is being continued: the summary")]
    compacted = CLAUDE | {"history": "compacted"}
    done = completed(proc.step(state, turn("m2", 1, shortened, "go on", tags=compacted)))
    assert (done.receipt_id, done.next_receipt_id, done.parent_receipt_id) == ("m1", "m2", None)
    unmarked = [refreshed, user("another task")]  # no marker: another conversation
    assert proc.step(state, turn("s1", 2, unmarked, "sub")) == []
    assert state.get("session/demo/s1")["parent"] == "m2"


def test_a_subagent_is_its_own_session_linked_to_the_turn_that_spawned_it() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "calls Task: find the test"))
    task = [EXPLORE, user("find the failing test")]
    assert proc.step(state, turn("s1", 1, task, "calls Grep")) == []
    assert state.get("fate/s1") == {"session": "s1", "turn": 0}
    sub = completed(
        proc.step(state, turn("s2", 2, [*task, assistant("calls Grep"), tool("a.py")], "in a.py"))
    )
    assert (sub.session_id, sub.receipt_id, sub.next_receipt_id) == ("s1", "s1", "s2")
    assert (sub.parent_session_id, sub.parent_receipt_id) == ("m1", "m1")
    assert sub.session_tag == "cc-7f3a"
    back = [*M1, assistant("calls Task: find the test"), tool("in a.py")]
    main = completed(proc.step(state, turn("m2", 3, back, "fixing a.py")))
    assert (main.session_id, main.receipt_id, main.next_receipt_id) == ("m1", "m1", "m2")
    assert main.parent_receipt_id is None


def test_a_request_the_agent_marks_as_a_subagents_never_joins_its_own_conversation() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "calls Agent"))
    fork = [*M1[:1], user("the forked task")]  # the agent's own system prompt
    assert proc.step(state, turn("f1", 1, fork, "x", tags=CLAUDE | {"subagent": "true"})) == []
    assert state.get("session/demo/f1")["parent"] == "m1"
    unmarked = [*M1[:1], user("a rewritten history")]  # unmarked: the agent's own
    assert completed(proc.step(state, turn("u1", 2, unmarked, "y"))).receipt_id == "m1"


def test_parallel_subagents_with_one_system_prompt_keep_their_own_conversations() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "calls Task twice"))
    a, b = [EXPLORE, user("search src/")], [EXPLORE, user("search tests/")]
    proc.step(state, turn("a1", 1, a, "grep src"))
    proc.step(state, turn("b1", 2, b, "grep tests"))
    done_b = completed(
        proc.step(state, turn("b2", 3, [*b, assistant("grep tests"), tool("t")], "x"))
    )
    done_a = completed(proc.step(state, turn("a2", 4, [*a, assistant("grep src"), tool("s")], "y")))
    assert (done_a.session_id, done_a.receipt_id) == ("a1", "a1")
    assert (done_b.session_id, done_b.receipt_id) == ("b1", "b1")
    assert done_a.parent_receipt_id == done_b.parent_receipt_id == "m1"


def test_a_subagents_session_expires_on_its_own_naming_its_parent() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "calls Task"))
    proc.step(state, turn("s1", 1, [EXPLORE, user("find it")], "found"))
    proc.step(state, turn("m2", 800, [*M1, assistant("calls Task"), tool("found")], "ok"))
    (ended,) = proc.step(state, exchange("x", 1000, [user("unrelated")], "-"))
    assert isinstance(ended, SessionExpired)
    assert (ended.session_id, ended.parent_session_id, ended.parent_receipt_id) == (
        "s1",
        "m1",
        "m1",
    )
    assert state.get("session/demo/m1")["subs"] == {}
    m3 = [*M1, assistant("calls Task"), tool("found"), assistant("ok"), user("thanks")]
    assert completed(proc.step(state, turn("m3", 1001, m3, "np"))).receipt_id == "m2"


def test_requests_without_tools_in_an_agents_session_are_side_calls_in_a_clients_not() -> None:
    proc, state = fresh()
    proc.step(state, turn("m1", 0, M1, "running"))
    assert proc.step(state, turn("t1", 1, [user("a title?")], "Tests", tools=False)) == []
    assert state.get("fate/t1") == {"side": "no-tools"}
    named = {"session": "mine"}
    proc.step(state, exchange("c1", 2, M1, "a", tags=named, tools=False))
    assert completed(proc.step(state, exchange("c2", 3, [user("b")], "b", tags=named, tools=False)))


def test_a_session_the_client_named_binds_in_arrival_order_whatever_the_conversation() -> None:
    proc, state = fresh()
    named = {"session": "mine"}
    proc.step(state, exchange("c1", 0, M1, "calls Task", tags=named))
    done = completed(proc.step(state, exchange("c2", 1, [EXPLORE, user("find")], "x", tags=named)))
    assert (done.receipt_id, done.parent_receipt_id) == ("c1", None)


def test_named_threads_bind_by_name_and_a_spawned_thread_names_its_parent() -> None:
    proc, state = fresh()
    codex = {"session": "s-1", "session-source": "codex"}
    root, child = codex | {"thread": "t-0"}, codex | {"thread": "t-1", "parent-thread": "t-0"}
    proc.step(state, exchange("r1", 0, [user("plan")], "spawning", tags=root))
    proc.step(state, exchange("k1", 1, [user("plan")], "on it", tags=child))  # same text
    k2 = completed(proc.step(state, exchange("k2", 2, [user("more")], "ok", tags=child)))
    assert (k2.session_id, k2.receipt_id, k2.parent_receipt_id) == ("k1", "k1", "r1")
    assert proc.step(state, exchange("k2-again", 3, [user("more")], "ok", tags=child)) == []
    r2 = completed(proc.step(state, exchange("r2", 4, [user("compacted")], "go", tags=root)))
    assert (r2.session_id, r2.receipt_id, r2.parent_session_id) == ("r1", "r1", None)


# -- replay and exactness over random agent sessions --------------------------------------


@dataclass
class Conversation:
    """One conversation of an agent session (its own or a subagent's): ground truth."""

    system: dict[str, Any]
    sent: list[dict[str, Any]] = field(default_factory=list)  # its last request
    answer: str = ""
    turns: list[str] = field(default_factory=list)
    parent: str | None = None  # the agent's turn that spawned this subagent
    compacted: list[dict[str, Any]] | None = None  # the history its next request carries

    def next_request(self, n: int) -> list[dict[str, Any]]:
        if self.compacted is not None:
            history, self.compacted = self.compacted, None
            return [*history, user(f"go on {n}")]
        if not self.turns:
            return [self.system, user(f"start {n}")]
        return [*self.sent, assistant(self.answer), tool(f"result {n}")]


ACTIONS = ("main", "main", "sub", "sub", "spawn", "compact", "side", "retry")


def _play(actions: list[tuple[str, int]]) -> tuple[list[InferenceRecorded], list[Conversation]]:
    """Inputs for one Claude Code-like session: its own conversation, subagents spawned
    from its last turn (``sub`` continues subagent ``pick``), compactions, side calls
    and retries of its last request."""
    main = Conversation(MAIN_SYSTEM)
    subs: list[Conversation] = []
    inputs: list[InferenceRecorded] = []
    for n, (action, pick) in enumerate(actions):
        rec = f"e{n}"
        if action in ("side", "compact", "retry"):
            if main.turns:
                inputs.append(_aside(rec, n, action, main))
            continue
        talk = subs[pick % len(subs)] if action == "sub" and subs else main
        if action == "spawn" and main.turns:
            system = {"role": "system", "content": f"subagent {pick % 3}"}
            talk = Conversation(system, parent=main.turns[-1])
            subs.append(talk)
        talk.sent, talk.answer = talk.next_request(n), f"answer {n}"
        inputs.append(turn(rec, n, list(talk.sent), talk.answer))
        talk.turns.append(rec)
    return inputs, [main, *subs]


def _aside(rec: str, n: int, action: str, main: Conversation) -> InferenceRecorded:
    """A request beside the agent's conversation: never a turn."""
    if action == "retry":
        return turn(rec, n, list(main.sent), "again")
    ask = [*main.sent, assistant(main.answer), user(f"{action} {n}")]
    if action == "side":
        return turn(rec, n, ask, "a title", tools=False)
    main.compacted = [MAIN_SYSTEM, user(f"summary {n}")]
    return turn(rec, n, ask, "the summary", tags=COMPACTION)


def _run(inputs: list[InferenceRecorded]) -> tuple[list[Event], DictState]:
    proc = SessionProcessor(SessionSettings(session_ttl=timedelta(days=1)))
    state, outputs = DictState(), []
    for event in inputs:
        outputs += proc.step(state, event)
        before = json.dumps(state.data, sort_keys=True)
        assert proc.step(state, event) == [], "a redelivery emitted"
        assert json.dumps(state.data, sort_keys=True) == before, "a redelivery changed state"
    return outputs, state


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 5)), max_size=30))
def test_each_conversation_completes_exactly_its_consecutive_turns_and_replays_exactly(
    actions: list[tuple[str, int]],
) -> None:
    inputs, conversations = _play(actions)
    outputs, state = _run(inputs)
    replayed, replay_state = _run(copy.deepcopy(inputs))
    assert replayed == outputs and replay_state.data == state.data
    got = {
        (o.receipt_id, o.next_receipt_id, o.session_id, o.parent_receipt_id)
        for o in outputs
        if isinstance(o, TurnCompleted)
    }
    expected = {
        (a, b, c.turns[0], c.parent)
        for c in conversations
        for a, b in zip(c.turns, c.turns[1:], strict=False)
    }
    assert got == expected
    assert not [o for o in outputs if isinstance(o, SessionExpired)]


def _merged(
    a: list[InferenceRecorded], b: list[InferenceRecorded], picks: list[bool], jumps: list[int]
) -> list[InferenceRecorded]:
    """Two agent sessions' inputs interleaved (each in its own order), time jumping."""
    streams = {
        "a": [replace(e, event_id=f"a{e.event_id}") for e in a],
        "b": [replace(e, event_id=f"b{e.event_id}", tags={**e.tags, "session": "cc-b"}) for e in b],
    }
    out: list[InferenceRecorded] = []
    clock = 0
    for n in range(len(a) + len(b)):
        pick = "a" if (picks[n % len(picks)] if picks else True) else "b"
        if not streams[pick]:
            pick = "b" if pick == "a" else "a"
        clock += jumps[n % len(jumps)] if jumps else 1
        out.append(replace(streams[pick].pop(0), occurred_at=at(clock)))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 5)), max_size=20),
    st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 5)), max_size=20),
    st.lists(st.booleans(), max_size=40),
    st.lists(st.sampled_from((0, 1, 30, 400, 1000)), max_size=40),
)
def test_with_expiry_and_eviction_turns_complete_at_most_once_and_replay_is_exact(
    a: list[tuple[str, int]],
    b: list[tuple[str, int]],
    picks: list[bool],
    jumps: list[int],
) -> None:
    inputs = _merged(_play(a)[0], _play(b)[0], picks, jumps)
    proc = SessionProcessor(SessionSettings(max_open_sessions=2))
    runs = []
    for _ in range(2):
        state, outputs = DictState(), []
        for event in inputs:
            outputs += proc.step(state, event)
            before = json.dumps(state.data, sort_keys=True)
            assert (
                proc.step(state, event) == [] and json.dumps(state.data, sort_keys=True) == before
            )
        runs.append((outputs, state))
    (outputs, state), (again, state_again) = runs
    assert again == outputs and state_again.data == state.data
    assert len({o.event_id for o in outputs}) == len(outputs)
    turns = [o for o in outputs if isinstance(o, TurnCompleted)]
    assert len({t.receipt_id for t in turns}) == len(turns), "a turn completed twice"
    ended: set[str] = set()
    for o in outputs:
        if isinstance(o, SessionExpired):
            ended.add(o.last_receipt_id)
        elif isinstance(o, TurnCompleted):
            assert o.receipt_id not in ended, f"an ended session's last turn completed: {o}"
    meta = state.get("open/demo")
    sessions = [k for k in state.data if k.startswith("session/demo/")]
    assert (meta["count"] if meta else 0) == len(sessions) <= 2
    for key in sessions:  # an agent's session lists only open subagent sessions
        subs = state.get(key).get("subs") or {}
        assert all(f"session/demo/{sid}" in state.data for sid in subs), key
