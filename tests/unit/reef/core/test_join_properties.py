"""The join processor, pure (DictState, no I/O): properties over random interleavings.

The property test feeds random interleavings of inferences (several scenarios, some
incomplete), reports (valid, multi-reference, identical resends, conflicting contents,
late, foreign, unknown, empty, repeated and already-consumed references) and
redeliveries of earlier events, then a far-future event per scenario so every parked
report expires. It checks, against the events alone:

* every distinct (scenario, report id, content hash) gets exactly one fate, and the fate
  is justified by the events before it (each rejection reason), and a report that could
  only have been accepted is accepted;
* no receipt appears in two samples and no output id is emitted twice;
* redelivering any event (processing it again) changes no state and emits nothing;
* hosting the step on a WriteBuffer over the state gives the same outputs and state.

Session merging has its property over random conversations; the examples, each rule
once by name, are in test_join_examples.py.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st

from reef.core.events import Event, InferenceRecorded, ReportRejected, ReportSubmitted, SampleJoined
from reef.core.ids import scenario_tag
from reef.core.join import JoinProcessor, JoinSettings
from reef.core.state import DictState, WriteBuffer
from reef_dev.events import chat_request, chat_response, inference, receipt, report
from tests.support.join import T0, fate_ids, snapshot

SCENARIOS = ("alpha", "beta", "gamma")
RELEASES = ("rel-a", "rel-b", "rel-c")
PARK = timedelta(minutes=5)
FAR_FUTURE = timedelta(days=30)


# ---------------------------------------------------------------------------
# A run: every input with the outputs it produced, checked as it goes


@dataclass
class Run:
    join: JoinProcessor
    state: DictState = field(default_factory=DictState)
    inputs: list[Event] = field(default_factory=list)
    #: (index of the input that produced it, output), in emission order
    outputs: list[tuple[int, Event]] = field(default_factory=list)

    def feed(self, event: Event) -> list[Event]:
        mirror = DictState()
        mirror.data = copy.deepcopy(self.state.data)
        buffer = WriteBuffer(mirror)
        buffered = self.join.step(buffer, event)
        out = self.join.step(self.state, event)
        assert out == buffered, "the step gave other outputs over a WriteBuffer"
        for key, value in buffer.changes():
            if value is None:
                mirror.delete(key)
            else:
                mirror.set(key, value)
        assert snapshot(mirror) == snapshot(self.state), "WriteBuffer changes != direct writes"
        index = len(self.inputs)
        self.inputs.append(event)
        self.outputs.extend((index, o) for o in out)
        return out

    def redeliver(self, event: Event) -> None:
        before = snapshot(self.state)
        assert self.join.step(self.state, event) == [], f"redelivery emitted for {event}"
        assert snapshot(self.state) == before, f"redelivery changed the state: {event}"


# ---------------------------------------------------------------------------
# Random workloads

ref_kind = st.sampled_from(["own"] * 8 + ["foreign", "garbage"])
ref_spec = st.tuples(ref_kind, st.integers(0, 4), st.sampled_from(SCENARIOS))
# time between events: mostly seconds, sometimes longer than the park timeout
gap = st.sampled_from([0, 0, 1, 250, *[1_000] * 4, *[5_000] * 4, 30_000, 30_000, 400_000])

inference_op = st.tuples(
    st.just("inference"),
    st.sampled_from(SCENARIOS),
    st.integers(0, 3),  # receipt 4 is never recorded: an unknown reference
    st.sampled_from([True, True, True, False]),  # complete, mostly
    st.sampled_from(RELEASES),
    gap,
)
report_op = st.tuples(
    st.just("report"),
    st.sampled_from(SCENARIOS),
    st.integers(0, 15),  # a small pool of report ids: conflicts happen
    st.one_of(
        *[st.lists(ref_spec, min_size=1, max_size=1)] * 3,
        *[st.lists(ref_spec, min_size=1, max_size=3)] * 2,
        st.just([]),
    ),
    st.sampled_from([1.0, 0.0]),
    gap,
)
# a new report (new id) on an earlier report's references: already consumed, mostly
reuse_op = st.tuples(st.just("reuse"), st.integers(0, 10_000), st.integers(100, 103), gap)
op = st.one_of(
    inference_op,
    report_op,
    # an identical resend of an earlier report (same id, same content, appended later)
    st.tuples(st.just("resend"), st.integers(0, 10_000), gap),
    reuse_op,
    # an event already processed, processed again (an at-least-once slip)
    st.tuples(st.just("redeliver"), st.integers(0, 10_000)),
)


@st.composite
def workloads(draw: st.DrawFn, size: int = 25) -> list[tuple[Any, ...]]:
    """Inferences, reports, resends and redeliveries, randomly interleaved."""
    items = [
        *draw(st.lists(inference_op, min_size=3, max_size=size)),
        *draw(st.lists(report_op, min_size=3, max_size=size)),
        *draw(st.lists(op, max_size=size // 2)),
        *draw(st.lists(reuse_op, max_size=4)),
    ]
    order = draw(st.permutations(range(len(items))))
    return [items[i] for i in order]


def build_refs(scenario: str, specs: list[tuple[str, int, str]]) -> list[str]:
    refs = []
    for kind, n, other in specs:
        if kind == "own":
            refs.append(receipt(scenario, n))
        elif kind == "foreign":
            foreign = other if other != scenario else next(s for s in SCENARIOS if s != scenario)
            refs.append(receipt(foreign, n))
        else:
            refs.append(f"not-a-receipt-{n}")
    return refs


def play(ops: list[tuple[Any, ...]], join: JoinProcessor) -> Run:
    run = Run(join)
    now = T0
    made: dict[str, InferenceRecorded] = {}
    for item in ops:
        kind = item[0]
        if kind == "inference":
            _, scenario, n, complete, release, dt = item
            rec = receipt(scenario, n)
            if rec in made:  # a receipt is one event: this is that event appended again
                run.feed(made[rec])
                continue
            now += timedelta(milliseconds=dt)
            made[rec] = inference(scenario, rec, now, release=release, complete=complete)
            run.feed(made[rec])
        elif kind == "report":
            _, scenario, rid, specs, score, dt = item
            now += timedelta(milliseconds=dt)
            refs = build_refs(scenario, specs)
            run.feed(report(scenario, f"{scenario}-r{rid}", refs, now, score=score))
        elif kind == "reuse":
            earlier = [e for e in run.inputs if isinstance(e, ReportSubmitted) and e.references]
            if earlier:
                _, k, rid, dt = item
                now += timedelta(milliseconds=dt)
                original = earlier[-1 - k % len(earlier)]
                refs = list(original.references)
                run.feed(report(original.scenario, f"{original.scenario}-r{rid}", refs, now))
        elif kind == "resend":
            earlier = [e for e in run.inputs if isinstance(e, ReportSubmitted)]
            if earlier:
                now += timedelta(milliseconds=item[2])
                original = earlier[-1 - item[1] % len(earlier)]
                # an identical resend: same id and content, appended again later
                run.feed(
                    report(
                        original.scenario,
                        original.event_id,
                        list(original.references),
                        now,
                        score=original.score,
                        feedback=json.loads(original.feedback_json),
                    )
                )
        elif run.inputs:  # redeliver an event already processed (at-least-once slip)
            run.redeliver(run.inputs[item[1] % len(run.inputs)])
    # one far-future event per scenario (an incomplete exchange): expires what is parked
    end = now + FAR_FUTURE
    for i, scenario in enumerate(SCENARIOS):
        run.feed(inference(scenario, receipt(scenario, 1000 + i), end, complete=False))
    return run


# ---------------------------------------------------------------------------
# The invariants


def check_invariants(
    run: Run, park: timedelta, *, merging: bool, completeness: bool = True
) -> None:
    outputs = [o for _, o in run.outputs]
    ids = Counter(o.event_id for o in outputs)
    assert not [i for i, n in ids.items() if n > 1], "an output id was emitted twice"

    reports = [(i, e) for i, e in enumerate(run.inputs) if isinstance(e, ReportSubmitted)]
    first_hash: dict[tuple[str, str], str] = {}
    contents: dict[tuple[str, str], set[str]] = {}
    for _, e in reports:
        first_hash.setdefault((e.scenario, e.event_id), e.content_hash)
        contents.setdefault((e.scenario, e.event_id), set()).add(e.content_hash)

    # one fate per distinct (scenario, id, content); every output is one of those fates
    by_output: dict[str, ReportSubmitted] = {}
    distinct: dict[tuple[str, str, str], ReportSubmitted] = {}
    first_index: dict[tuple[str, str, str], int] = {}
    for i, e in reports:
        key = (e.scenario, e.event_id, e.content_hash)
        distinct.setdefault(key, e)
        first_index.setdefault(key, i)
        for fid in fate_ids(e):
            by_output[fid] = e
    fates: dict[tuple[str, str, str], list[tuple[int, int, Event]]] = {}
    for position, (index, out) in enumerate(run.outputs):
        assert isinstance(out, SampleJoined | ReportRejected), out
        assert out.event_id in by_output, f"an output for no report content: {out}"
        e = by_output[out.event_id]
        assert out.report_id == e.event_id and out.scenario == e.scenario
        fates.setdefault((e.scenario, e.event_id, e.content_hash), []).append(
            (position, index, out)
        )
    missing = set(distinct) - set(fates)
    assert not missing, f"reports without a fate: {sorted(missing)}"
    assert all(len(v) == 1 for v in fates.values()), "a report content got two fates"

    # where each receipt was recorded (complete), and which samples took it
    recorded_at: dict[str, int] = {}
    for i, recorded in enumerate(run.inputs):
        if isinstance(recorded, InferenceRecorded) and recorded.complete:
            recorded_at.setdefault(recorded.event_id, i)
    taken: dict[str, int] = {}  # receipt -> position of the sample that took it
    for position, (_, out) in enumerate(run.outputs):
        if isinstance(out, SampleJoined):
            for r in out.references:
                assert r not in taken, f"receipt {r} is in two samples"
                taken[r] = position

    for key, [(position, index, out)] in fates.items():
        scenario, rid, digest = key
        e = distinct[key]
        refs = list(e.references)
        tag = scenario_tag(scenario)
        is_first = first_hash[(scenario, rid)] == digest
        if isinstance(out, SampleJoined):
            assert is_first, "a conflicting content was accepted"
            assert refs and len(set(refs)) == len(refs)
            assert all(r.startswith(tag) for r in refs)
            assert set(refs) <= set(out.references)
            if not merging:
                assert sorted(out.references) == sorted(refs)
            for r in out.references:
                assert recorded_at.get(r, len(run.inputs)) <= index, "joined before recorded"
                assert taken[r] == position
            trajectory = json.loads(out.trajectory_json)
            assert [t["receipt"] for t in trajectory] == out.references
            records = {e2.event_id: e2 for e2 in run.inputs if isinstance(e2, InferenceRecorded)}
            assert out.release_ids == list(
                dict.fromkeys(records[r].release_id for r in out.references)
            )
            times = [records[r].occurred_at for r in out.references]
            assert times == sorted(times), "trajectory not in event-time order"
            assert out.score == e.score and out.feedback_json == e.feedback_json
            continue
        assert isinstance(out, ReportRejected)
        reason = out.reason
        if not is_first:
            assert reason == "conflict", (key, reason)
            continue
        if reason == "conflict":
            # the original was still parked when another content for its id arrived
            trigger = run.inputs[index]
            assert isinstance(trigger, ReportSubmitted)
            assert (trigger.scenario, trigger.event_id) == (scenario, rid)
            assert trigger.content_hash != digest
        elif reason == "no_references":
            assert refs == []
        elif reason == "foreign_reference":
            assert any(not r.startswith(tag) for r in refs)
        elif reason == "duplicate_reference":
            assert len(set(refs)) != len(refs)
        elif reason == "already_consumed":
            assert any(taken.get(r, len(run.outputs)) < position for r in refs)
        elif reason == "unknown_reference":
            assert any(recorded_at.get(r, len(run.inputs)) >= index for r in refs)
        else:
            raise AssertionError(f"unexpected reason {reason!r}")

    # completeness: a report that nothing could stop is accepted
    for key, e in distinct.items() if completeness else ():
        scenario, rid, digest = key
        refs = list(e.references)
        j = first_index[key]
        if (
            len(contents[(scenario, rid)]) != 1
            or not refs
            or len(set(refs)) != len(refs)
            or any(not r.startswith(scenario_tag(scenario)) for r in refs)
            or any(r in taken and taken[r] != fates[key][0][0] for r in refs)
        ):
            continue
        deadline = e.occurred_at + park
        expiry = next(
            (
                i
                for i in range(j + 1, len(run.inputs))
                if run.inputs[i].scenario == scenario and run.inputs[i].occurred_at > deadline
            ),
            len(run.inputs),
        )
        if all(recorded_at.get(r, len(run.inputs)) < expiry for r in refs):
            assert isinstance(fates[key][0][2], SampleJoined), (key, fates[key][0][2])


def check_redelivery_of_everything(run: Run) -> None:
    """Every input, processed again at the end, is a no-op."""
    for event in run.inputs:
        run.redeliver(event)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(workloads())
def test_join_fates_over_random_interleavings(ops: list[tuple[Any, ...]]) -> None:
    join = JoinProcessor(JoinSettings(park_timeout=PARK, max_parked=10_000))
    run = play(ops, join)
    for _, out in run.outputs:
        note(out.reason if isinstance(out, ReportRejected) else "joined")
    check_invariants(run, PARK, merging=False)
    check_redelivery_of_everything(run)
    # nothing is left waiting after the far-future events
    assert not [k for k in run.state.data if k.startswith("parked/")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(12), st.integers(0, 3))
def test_join_fates_with_a_small_parking_lot(ops: list[tuple[Any, ...]], limit: int) -> None:
    """Over max_parked a report is rejected at once; the invariants still hold."""
    join = JoinProcessor(JoinSettings(park_timeout=PARK, max_parked=limit))
    run = play(ops, join)
    check_invariants(run, PARK, merging=False, completeness=False)
    for scenario in SCENARIOS:
        parked = run.state.get(f"parked/{scenario}") or []
        assert len(parked) <= limit
    check_redelivery_of_everything(run)


# ---------------------------------------------------------------------------
# Session merging, over random conversations

conversation_op = st.one_of(
    # continue conversation c (a new turn extending its latest exchange), or start it
    st.tuples(st.just("turn"), st.sampled_from(SCENARIOS[:2]), st.integers(0, 1)),
    st.tuples(st.just("turn"), st.sampled_from(SCENARIOS[:2]), st.integers(0, 1)),
    # report on the k-th latest exchange so far (maybe several)
    st.tuples(
        st.just("report"),
        st.lists(st.integers(0, 10_000), min_size=1, max_size=2),
        st.integers(0, 3),
    ),
    # deliver a held-back exchange late (after reports on it)
    st.tuples(st.just("hold"), st.sampled_from(SCENARIOS[:2]), st.integers(0, 2)),
    st.tuples(st.just("release_held")),
    st.tuples(st.just("redeliver"), st.integers(0, 10_000)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(conversation_op, min_size=1, max_size=40))
def test_merged_sessions_never_train_a_turn_twice(ops: list[tuple[Any, ...]]) -> None:
    join = JoinProcessor(JoinSettings(park_timeout=PARK, merge_sessions=True))
    run = Run(join)
    now = T0
    threads: dict[tuple[str, int], list[dict[str, Any]]] = {}
    exchanges: list[InferenceRecorded] = []
    held: list[InferenceRecorded] = []
    counter = 0
    for item in ops:
        now += timedelta(seconds=1)
        kind = item[0]
        if kind in ("turn", "hold"):
            _, scenario, c = item
            counter += 1
            messages = [*threads.get((scenario, c), []), {"role": "user", "content": f"q{counter}"}]
            answer = f"a{counter}"
            threads[(scenario, c)] = [*messages, {"role": "assistant", "content": answer}]
            event = inference(
                scenario,
                receipt(scenario, counter),
                now,
                release=RELEASES[counter % 3],
                request=chat_request(messages),
                response=chat_response(answer),
            )
            exchanges.append(event)
            if kind == "hold":
                held.append(event)
            else:
                run.feed(event)
        elif kind == "release_held":
            for event in held:
                run.feed(event)
            held = []
        elif kind == "report" and exchanges:
            _, picks, rid = item
            chosen = [exchanges[-1 - k % len(exchanges)] for k in picks]
            scenario = chosen[0].scenario
            refs = list(dict.fromkeys(e.event_id for e in chosen if e.scenario == scenario))
            run.feed(report(scenario, f"r{rid}-{counter}", refs, now))
        elif kind == "redeliver" and run.inputs:
            run.redeliver(run.inputs[item[1] % len(run.inputs)])
    for event in held:
        run.feed(event)
    end = now + FAR_FUTURE
    for i, scenario in enumerate(SCENARIOS):
        run.feed(inference(scenario, receipt(scenario, 10_000 + i), end, complete=False))

    check_invariants(run, PARK, merging=True)
    check_redelivery_of_everything(run)
    # a merged-in turn is an earlier turn of a referenced exchange's conversation
    said = {e.event_id: _conversation_of(e) for e in exchanges}
    asked = {e.event_id: json.loads(e.request_json or "{}")["messages"] for e in exchanges}
    # the first report with an id is the one that can be joined (a later one with other
    # content is a conflict), so map each id to its first report
    reports: dict[tuple[str, str], ReportSubmitted] = {}
    for e in run.inputs:
        if isinstance(e, ReportSubmitted):
            reports.setdefault((e.scenario, e.event_id), e)
    for _, out in run.outputs:
        if isinstance(out, SampleJoined):
            refs = reports[(out.scenario, out.report_id)].references
            for extra in set(out.references) - set(refs):
                note("merged a turn")
                prefix = said[extra]
                assert any(asked[r][: len(prefix)] == prefix for r in refs), extra


def _conversation_of(event: InferenceRecorded) -> list[dict[str, Any]]:
    """The request's messages followed by the answer: what a continuation starts with."""
    messages = json.loads(event.request_json or "{}")["messages"]
    answer = json.loads(event.response_json or "{}")["choices"][0]["message"]
    return [*messages, {"role": "assistant", "content": answer["content"]}]
