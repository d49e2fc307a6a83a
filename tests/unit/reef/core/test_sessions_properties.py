"""The session processor, pure: properties over random interleavings of agent sessions.

Random sessions (tagged or untagged, several scenarios) advance turn by turn, with
client retries, side calls and incomplete exchanges mixed in, time jumps that outlast
the TTL, a small open-session cap, and redeliveries of earlier inputs. Checked:

* redelivering any input emits nothing and changes no state;
* replaying the inputs into a fresh state gives the same outputs and the same state,
  and hosting the step on a WriteBuffer gives the same as direct writes;
* each turn is completed at most once, each output id is emitted once, retries, side
  calls and incomplete exchanges never appear in a completed turn, and a session's last
  turn, once expired, never completes;
* with no expiry, exactly the consecutive main turns of each session are completed.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.core.events import Event, InferenceRecorded, SessionExpired, TurnCompleted
from reef.core.sessions import SessionProcessor, SessionSettings
from reef.core.state import DictState, WriteBuffer
from tests.support.sessions import assistant, exchange, tool, user

SCENARIOS = ("alpha", "beta")


@dataclass
class Script:
    """One agent session as the client sees it: its transcript and its tag."""

    scenario: str
    name: str
    tag: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    last_answer: str | None = None
    main: list[str] = field(default_factory=list)  # receipts of its turns, in order


Step = tuple[str, int, int]  # (action, script index, time advance in seconds)

ACTIONS = ("turn", "turn", "turn", "retry", "side", "incomplete", "redeliver")


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Script], list[Step]]:
    scripts = [
        Script(
            scenario=draw(st.sampled_from(SCENARIOS)),
            name=f"s{i}",
            tag=f"tag-{i}" if draw(st.booleans()) else None,
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from(ACTIONS),
                st.integers(0, len(scripts) - 1),
                st.sampled_from((0, 1, 5, 60, 2000)),
            ),
            max_size=30,
        )
    )
    return scripts, steps


@dataclass
class Run:
    proc: SessionProcessor
    state: DictState = field(default_factory=DictState)
    inputs: list[Event] = field(default_factory=list)
    outputs: list[Event] = field(default_factory=list)

    def feed(self, event: Event) -> None:
        mirror = DictState()
        mirror.data = copy.deepcopy(self.state.data)
        buffer = WriteBuffer(mirror)
        buffered = self.proc.step(buffer, event)
        out = self.proc.step(self.state, event)
        assert out == buffered, "the step gave other outputs over a WriteBuffer"
        for key, value in buffer.changes():
            if value is None:
                mirror.delete(key)
            else:
                mirror.set(key, value)
        assert _snap(mirror) == _snap(self.state), "WriteBuffer changes != direct writes"
        self.inputs.append(event)
        self.outputs.extend(out)

    def redeliver(self, event: Event) -> None:
        before = _snap(self.state)
        assert self.proc.step(self.state, event) == [], f"redelivery emitted for {event}"
        assert _snap(self.state) == before, f"redelivery changed the state: {event}"


def _snap(state: DictState) -> str:
    return json.dumps(state.data, sort_keys=True)


def _play(
    scripts: list[Script], steps: list[Step], proc: SessionProcessor
) -> tuple[Run, set[str], set[str]]:
    """Run the workload: the run, the side and incomplete receipts, the retries."""
    run = Run(proc)
    never: set[str] = set()
    retries: set[str] = set()
    clock = 0
    for n, (action, index, advance) in enumerate(steps):
        clock += advance
        script = scripts[index]
        tags = {"session": script.tag} if script.tag else {}
        rec = f"{script.name}-{n}"
        if action == "redeliver":
            if run.inputs:
                run.redeliver(run.inputs[n % len(run.inputs)])
            continue
        if action == "turn":
            if script.messages:
                script.messages += [assistant(script.last_answer or ""), _next_state(n)]
            else:
                script.messages = [user(f"task of {script.name} in {script.scenario}")]
            answer = f"answer {rec}"
            run.feed(
                exchange(
                    rec, clock, list(script.messages), answer, scenario=script.scenario, tags=tags
                )
            )
            script.last_answer = answer
            script.main.append(rec)
            continue
        if action == "retry" and script.messages:
            retries.add(rec)
            run.feed(
                exchange(
                    rec, clock, list(script.messages), "again", scenario=script.scenario, tags=tags
                )
            )
        elif action == "side":
            never.add(rec)
            side = [*script.messages, user("summarise")]
            run.feed(exchange(rec, clock, side, "title", scenario=script.scenario, tools=False))
        elif action == "incomplete":
            never.add(rec)
            run.feed(
                exchange(rec, clock, [user(rec)], "", scenario=script.scenario, complete=False)
            )
    return run, never, retries


def _next_state(n: int) -> dict[str, Any]:
    return tool(f"result {n}") if n % 2 else user(f"reply {n}")


def _check_common(run: Run, never: set[str], retries: set[str]) -> None:
    ids = Counter(o.event_id for o in run.outputs)
    assert all(c == 1 for c in ids.values()), ids
    turns = [o for o in run.outputs if isinstance(o, TurnCompleted)]
    assert len({t.receipt_id for t in turns}) == len(turns), "a turn completed twice"
    assert len({t.next_receipt_id for t in turns}) == len(turns), "a next state used twice"
    for t in turns:
        assert t.receipt_id not in never and t.next_receipt_id not in never | retries, t
        if t.receipt_id in retries:  # a resend once the session it repeats has ended
            assert run.state.get(f"fate/{t.receipt_id}") == {"session": t.receipt_id, "turn": 0}
    expired: set[str] = set()
    for o in run.outputs:
        if isinstance(o, SessionExpired):
            expired.add(o.last_receipt_id)
        elif isinstance(o, TurnCompleted):
            assert o.receipt_id not in expired, f"an expired last turn completed: {o}"
    replayed = Run(run.proc)
    for event in run.inputs:
        replayed.feed(event)
    assert replayed.outputs == run.outputs
    assert _snap(replayed.state) == _snap(run.state)
    for scenario in SCENARIOS:  # the activity list and the count agree with the sessions
        meta = run.state.get(f"open/{scenario}")
        sessions = [k for k in run.state.data if k.startswith(f"session/{scenario}/")]
        assert (meta["count"] if meta else 0) == len(sessions)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_redelivery_and_replay_are_exact_and_each_turn_completes_at_most_once(
    workload: tuple[list[Script], list[Step]],
) -> None:
    scripts, steps = workload
    proc = SessionProcessor(SessionSettings(max_open_sessions=3))
    run, never, retries = _play(scripts, steps, proc)
    _check_common(run, never, retries)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_without_expiry_exactly_the_consecutive_turns_of_each_session_complete(
    workload: tuple[list[Script], list[Step]],
) -> None:
    scripts, steps = workload
    from datetime import timedelta

    proc = SessionProcessor(SessionSettings(session_ttl=timedelta(days=365)))
    run, never, retries = _play(scripts, steps, proc)
    _check_common(run, never, retries)
    assert all(run.state.get(f"fate/{r}") == "retry" for r in retries)
    expected = {
        (s.scenario, a, b) for s in scripts for a, b in zip(s.main, s.main[1:], strict=False)
    }
    got = {
        (o.scenario, o.receipt_id, o.next_receipt_id)
        for o in run.outputs
        if isinstance(o, TurnCompleted)
    }
    assert got == expected
    assert not [o for o in run.outputs if isinstance(o, InferenceRecorded)]
