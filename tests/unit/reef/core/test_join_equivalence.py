"""The join decides exactly as its plain reference form does.

:class:`reef.core.join.JoinProcessor` (each referenced record read once, the trajectory
walk reusing it, parked lists split in one pass) runs beside the reference decision code
(``tests/support/reference_join.py``) over random multi-turn workloads:
sessions merged or not, ties in event time, multi-reference and unknown references,
parking, expiry, a tiny parking lot, erasures and redeliveries. Every step must give equal
outputs and leave an equal state. The id helpers' fast paths are pinned to their general
form here too.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reef.core.events import Event, InferenceRecorded, RecordErased, SampleJoined
from reef.core.ids import canonical_json, content_hash, derived_id
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.state import DictState
from reef_dev.events import chat_request, chat_response, inference, receipt, report
from tests.support.join import T0
from tests.support.reference_join import ReferenceJoin

SCENARIOS = ("eq-a", "eq-b")
CHECKS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: event-time gaps: none (ties), a second, past the parking timeout
gaps = st.sampled_from([0, 0, 1000, 6 * 60 * 1000])
exchange_op = st.tuples(
    st.just("exchange"), st.integers(0, 1), st.integers(0, 1), gaps, st.booleans()
)
report_op = st.tuples(
    st.just("report"),
    st.integers(0, 1),
    # the scenario's exchanges made, newest first; -1: unknown; -2: the other scenario's
    st.lists(st.integers(-2, 6), min_size=1, max_size=4, unique=True),
    st.integers(0, 40),
    st.sampled_from([0.0, 1.0]),
    gaps,
)
erase_op = st.tuples(st.just("erase"), st.integers(0, 30), gaps)
redeliver_op = st.tuples(st.just("redeliver"), st.integers(0, 100))


@st.composite
def ops(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Mostly exchanges and reports, a few erasures and redeliveries, interleaved."""
    items = [
        *draw(st.lists(exchange_op, min_size=4, max_size=25)),
        *draw(st.lists(report_op, min_size=3, max_size=20)),
        *draw(st.lists(st.one_of(erase_op, redeliver_op), max_size=4)),
    ]
    order = draw(st.permutations(range(len(items))))
    return [items[i] for i in order]


def events_of(plan: list[tuple[Any, ...]]) -> list[Event]:
    """Exchanges continue one of a few conversations per scenario (so merged sessions
    link turns); reports quote them; erasures and redeliveries are mixed in."""
    now = T0
    out: list[Event] = []
    made: list[InferenceRecorded] = []
    mine: dict[str, list[str]] = {scenario: [] for scenario in SCENARIOS}
    talks: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for item in plan:
        kind = item[0]
        if kind == "redeliver":
            if out:
                out.append(out[item[1] % len(out)])
            continue
        now += timedelta(milliseconds=item[-2] if kind == "exchange" else item[-1])
        if kind == "exchange":
            _, s, talk, _, complete = item
            scenario = SCENARIOS[s]
            messages = talks.setdefault((scenario, talk), [])
            messages.append({"role": "user", "content": f"turn {len(messages)} of {talk}"})
            answer = f"answer {len(messages)} of {talk}"
            rec = receipt(scenario, len(made))
            event = inference(
                scenario,
                rec,
                now,
                complete=complete,
                request=chat_request(list(messages)),
                response=chat_response(answer),
            )
            messages.append({"role": "assistant", "content": answer})
            made.append(event)
            mine[scenario].append(rec)
            out.append(event)
        elif kind == "report":
            _, s, picks, rid, score, _ = item
            scenario = SCENARIOS[s]
            refs = [_pick(mine, scenario, p) for p in picks]
            out.append(report(scenario, f"{scenario}-r{rid}", refs, now, score=score))
        elif made:
            erased = made[item[1] % len(made)]
            out.append(
                RecordErased(
                    event_id=f"erase-{len(out)}",
                    scenario=erased.scenario,
                    occurred_at=now,
                    producer="test",
                    record_id=erased.event_id,
                )
            )
    return out


def _pick(mine: dict[str, list[str]], scenario: str, pick: int) -> str:
    other = next(s for s in SCENARIOS if s != scenario)
    if pick == -2 and mine[other]:
        return mine[other][-1]
    if pick < 0 or not mine[scenario]:
        return receipt(scenario, 900)  # never recorded: parks, then expires
    return mine[scenario][-1 - pick % len(mine[scenario])]


@CHECKS
@given(plan=ops(), merge=st.booleans(), max_parked=st.sampled_from([1, 1000]))
def test_the_join_decides_as_the_reference_decides(
    plan: list[tuple[Any, ...]], merge: bool, max_parked: int
) -> None:
    join_settings = JoinSettings(merge_sessions=merge, max_parked=max_parked)
    current, reference = JoinProcessor(join_settings), ReferenceJoin(join_settings)
    state, expected_state = DictState(), DictState()
    for event in events_of(plan):
        assert current.step(state, event) == reference.step(expected_state, event)
        assert state.data == expected_state.data


@settings(max_examples=200, deadline=None, derandomize=True)
@given(parts=st.lists(st.text(max_size=20), min_size=1, max_size=5))
def test_derived_ids_are_the_hash_of_the_canonical_list(parts: list[str]) -> None:
    assert derived_id(*parts) == content_hash(parts)[:32]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(value=json_values)
def test_canonical_json_is_the_standard_library_form(value: Any) -> None:
    standard = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == standard


def test_earlier_turns_of_equal_time_keep_the_order_the_walk_found_them() -> None:
    """Refs [A3, C2, A2] at one event time: A3's walk passes A2 and finds A1 before C2's
    walk finds C1, so A1 precedes C1 (sorting by time alone cannot tell them apart)."""
    plan: list[tuple[Any, ...]] = [
        ("exchange", 0, talk, 0, True) for talk in (0, 0, 0, 1, 1)
    ]  # A1 A2 A3 C1 C2, one instant
    exchanges = events_of(plan)
    a1, a2, a3, c1, c2 = (e.event_id for e in exchanges)
    quoting = report(SCENARIOS[0], "tie", [a3, c2, a2], T0)
    join_settings = JoinSettings(merge_sessions=True)
    for join in (JoinProcessor(join_settings), ReferenceJoin(join_settings)):
        state = DictState()
        for event in exchanges:
            assert join.step(state, event) == []
        (sample,) = join.step(state, quoting)
        assert isinstance(sample, SampleJoined)
        assert sample.references == [a1, c1, a3, c2, a2]
