"""The release chain, pure (DictState, no I/O): properties over random proposals, examples.

Random workloads mix scenario creations (and racing duplicates), proposals on the head,
on stale parents and on nothing, groups of concurrent proposals naming the same head,
rollbacks, pending releases and their promotion, invalid operations, sample ids used
twice, redelivered events and retried proposals. Checked:

* each proposal gets exactly one decision, the one a small model of the rules predicts;
* per scenario the non-pending releases form a single line: exactly one commit per
  parent, each commit's parent is the previous head, starting at the creation;
* every release id recomputes from (scenario, parent, content, operation);
* a sample id is consumed by at most one release; release ids are never reused;
* redelivering any event changes nothing and emits nothing.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st

from reef.core.chain import ReleaseChainProcessor
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    ReportSubmitted,
    ScenarioCreated,
)
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, release_id
from reef.core.state import DictState, WriteBuffer
from reef_dev.events import created, proposal

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SCENARIOS = ("alpha", "beta")
SEEDS = {"alpha": None, "beta": "seed-content"}
CONTENTS = ("c0", "c1", "c2", "c3")
SAMPLES = tuple(f"sample-{i}" for i in range(4))


# ---------------------------------------------------------------------------
# Event builders


def snapshot(state: DictState) -> str:
    return json.dumps(state.data, sort_keys=True)


# ---------------------------------------------------------------------------
# A model of the rules, written from the module docstring


@dataclass
class ScenarioModel:
    head: str
    releases: dict[str, dict[str, Any]]  # id -> {"content", "pending"}
    samples: set[str] = field(default_factory=set)


@dataclass
class Model:
    scenarios: dict[str, ScenarioModel] = field(default_factory=dict)
    decided: set[str] = field(default_factory=set)

    def expect(self, event: Event) -> list[tuple[str, ...]]:
        """What the chain should emit, as (kind, release id or reason, ...) tuples."""
        if isinstance(event, ScenarioCreated):
            if event.scenario in self.scenarios:
                return []
            content = event.seed_content_id or EMPTY_CONTENT_ID
            self.scenarios[event.scenario] = ScenarioModel(
                event.initial_release_id,
                {event.initial_release_id: {"content": content, "pending": False}},
            )
            return [("committed", event.initial_release_id)]
        if not isinstance(event, ReleaseProposed):
            return []
        if event.proposal_id in self.decided:
            return []
        self.decided.add(event.proposal_id)
        view = self.scenarios.get(event.scenario)
        if view is None:
            return [("rejected", "unknown_scenario", "")]
        head = view.head
        if event.operation not in ("training", "rollback", "promote"):
            return [("rejected", "invalid_operation", head)]
        if event.parent_release_id != head:
            return [("rejected", "stale_parent", head)]
        if event.operation != "training":
            target = view.releases.get(event.target_release_id or "")
            if target is None:
                return [("rejected", "unknown_target", head)]
            if event.operation == "promote" and not target["pending"]:
                return [("rejected", "not_pending", head)]
            if target["content"] != event.content_id:
                return [("rejected", "content_mismatch", head)]
        if view.samples & set(event.sample_ids):
            return [("rejected", "samples_already_consumed", head)]
        new = release_id(event.scenario, head, event.content_id, event.operation)
        if new in view.releases:
            return [("rejected", "duplicate_release", head)]
        view.releases[new] = {"content": event.content_id, "pending": event.pending}
        view.samples |= set(event.sample_ids)
        if event.operation == "promote":
            view.releases[event.target_release_id or ""]["pending"] = False
        if not event.pending:
            view.head = new
        return [("committed", new)]


def summary(out: Event) -> tuple[str, ...]:
    if isinstance(out, ReleaseCommitted):
        return ("committed", out.release_id)
    assert isinstance(out, ReleaseRejected), out
    return ("rejected", out.reason, out.head_release_id or "")


# ---------------------------------------------------------------------------
# A run


@dataclass
class Run:
    chain: ReleaseChainProcessor = field(default_factory=ReleaseChainProcessor)
    state: DictState = field(default_factory=DictState)
    model: Model = field(default_factory=Model)
    inputs: list[Event] = field(default_factory=list)
    outputs: list[tuple[int, Event]] = field(default_factory=list)
    #: what a proposer reading the chain's outputs so far sees, per scenario
    seen_head: dict[str, str] = field(default_factory=dict)
    known: dict[str, list[str]] = field(default_factory=dict)

    def feed(self, event: Event) -> list[Event]:
        mirror = DictState()
        mirror.data = copy.deepcopy(self.state.data)
        buffer = WriteBuffer(mirror)
        buffered = self.chain.step(buffer, event)
        out = self.chain.step(self.state, event)
        assert out == buffered
        for key, value in buffer.changes():
            if value is None:
                mirror.delete(key)
            else:
                mirror.set(key, value)
        assert snapshot(mirror) == snapshot(self.state)
        assert [summary(o) for o in out] == self.model.expect(event), event
        index = len(self.inputs)
        self.inputs.append(event)
        self.outputs.extend((index, o) for o in out)
        for o in out:
            if isinstance(o, ReleaseCommitted):
                self.known.setdefault(o.scenario, []).append(o.release_id)
                if not o.pending:
                    self.seen_head[o.scenario] = o.release_id
        return out

    def redeliver(self, event: Event) -> None:
        before = snapshot(self.state)
        assert self.chain.step(self.state, event) == [], event
        assert snapshot(self.state) == before, event


# ---------------------------------------------------------------------------
# Random workloads

parent_choice = st.sampled_from(["head"] * 5 + ["stale", "none", "bogus"])
scenario_choice = st.sampled_from([*SCENARIOS, *SCENARIOS, "nowhere"])
propose_op = st.tuples(
    st.just("propose"),
    scenario_choice,
    parent_choice,
    st.sampled_from(["training"] * 6 + ["retrain"]),
    st.sampled_from(CONTENTS),
    st.integers(0, 10_000),
    st.sampled_from([False, False, True]),  # pending
    st.lists(st.sampled_from(SAMPLES), max_size=2),
)
revert_op = st.tuples(
    st.just("propose"),
    scenario_choice,
    parent_choice,
    st.sampled_from(["rollback", "rollback", "promote"]),
    st.sampled_from(["target", "target", "target", "c0"]),
    st.integers(0, 10_000),  # which known release it targets (0: the latest)
    st.sampled_from([False, False, False, True]),
    st.lists(st.sampled_from(SAMPLES), max_size=1),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.sampled_from(SCENARIOS)),
        propose_op,
        propose_op,
        revert_op,
        # k proposers read the same head and race
        st.tuples(
            st.just("race"),
            st.sampled_from(SCENARIOS),
            st.lists(st.sampled_from(CONTENTS), min_size=2, max_size=5),
        ),
        # a pending release, then its promotion (maybe stale by then)
        st.tuples(st.just("pending_then_promote"), st.sampled_from(SCENARIOS), st.booleans()),
        st.tuples(st.just("redeliver"), st.integers(0, 10_000)),
        # the same proposal id sent again as a new event (a trainer retrying)
        st.tuples(st.just("retry"), st.integers(0, 10_000)),
    ),
    min_size=1,
    max_size=50,
)


def play(items: list[tuple[Any, ...]]) -> Run:
    run = Run()
    now = T0
    counter = 0

    def tick() -> datetime:
        nonlocal now
        now += timedelta(seconds=1)
        return now

    def next_id() -> str:
        nonlocal counter
        counter += 1
        return f"p{counter}"

    for item in items:
        kind = item[0]
        if kind == "create":
            run.feed(created(item[1], tick(), SEEDS[item[1]]))
        elif kind == "propose":
            _, scenario, parent_kind, operation, content, pick, pending, samples = item
            known = run.known.get(scenario, [])
            head = run.seen_head.get(scenario)
            if parent_kind == "head":
                parent = head
            elif parent_kind == "stale" and known:
                parent = known[pick % len(known)]
            elif parent_kind == "none":
                parent = None
            else:
                parent = "0" * 32
            target = known[-1 - pick % len(known)] if known else None
            if operation not in ("rollback", "promote"):
                target = None
            elif pick % 7 == 6:
                target = "f" * 32  # never released
            if content == "target":
                target_event = next(
                    (
                        o
                        for _, o in run.outputs
                        if isinstance(o, ReleaseCommitted) and o.release_id == target
                    ),
                    None,
                )
                content = target_event.content_id if target_event else CONTENTS[0]
            run.feed(
                proposal(
                    scenario,
                    next_id(),
                    parent,
                    content,
                    tick(),
                    operation=operation,
                    target=target,
                    pending=pending,
                    samples=samples,
                )
            )
        elif kind == "race":
            _, scenario, contents = item
            head = run.seen_head.get(scenario)
            racers = [proposal(scenario, next_id(), head, c, tick()) for c in contents]
            decisions = [o for r in racers for o in run.feed(r)]
            if head is not None:
                committed = [o for o in decisions if isinstance(o, ReleaseCommitted)]
                assert len(committed) <= 1
                assert all(
                    o.reason in ("stale_parent", "duplicate_release")
                    for o in decisions
                    if isinstance(o, ReleaseRejected)
                )
        elif kind == "pending_then_promote":
            _, scenario, intervene = item
            head = run.seen_head.get(scenario)
            content = f"candidate-{counter}"
            decided: list[Event | None] = list(
                run.feed(proposal(scenario, next_id(), head, content, tick(), pending=True))
            )
            (decision,) = decided or [None]
            if isinstance(decision, ReleaseCommitted):
                if intervene:  # another release lands first: the promotion is stale
                    run.feed(
                        proposal(
                            scenario,
                            next_id(),
                            run.seen_head.get(scenario),
                            f"other-{counter}",
                            tick(),
                        )
                    )
                run.feed(
                    proposal(
                        scenario,
                        next_id(),
                        head,
                        content,
                        tick(),
                        operation="promote",
                        target=decision.release_id,
                    )
                )
        elif kind == "redeliver" and run.inputs:
            run.redeliver(run.inputs[-1 - item[1] % len(run.inputs)])
        elif kind == "retry":
            earlier = [e for e in run.inputs if isinstance(e, ReleaseProposed)]
            if earlier:
                original = earlier[-1 - item[1] % len(earlier)]
                again = proposal(
                    original.scenario,
                    original.proposal_id,
                    original.parent_release_id,
                    original.content_id,
                    tick(),
                    operation=original.operation,
                    target=original.target_release_id,
                    pending=original.pending,
                    samples=list(original.sample_ids),
                    event_id=f"retry-{counter}-{original.event_id}",
                )
                out = run.feed(again)
                assert out == []
    return run


def check_chain(run: Run) -> None:
    outputs = [o for _, o in run.outputs]
    assert len({o.event_id for o in outputs}) == len(outputs), "an output id twice"
    # one decision per proposal id
    decisions = Counter(
        o.proposal_id for o in outputs if isinstance(o, ReleaseCommitted | ReleaseRejected)
    )
    proposals = {e.proposal_id for e in run.inputs if isinstance(e, ReleaseProposed)}
    creations = {e.event_id for e in run.inputs if isinstance(e, ScenarioCreated)}
    assert set(decisions) == proposals | creations
    assert all(n == 1 for n in decisions.values())

    commits = [o for o in outputs if isinstance(o, ReleaseCommitted)]
    ids = [c.release_id for c in commits]
    assert len(ids) == len(set(ids)), "a release id was reused"
    consumed = [(c.scenario, s) for c in commits for s in set(c.sample_ids)]
    assert len(consumed) == len(set(consumed)), "a sample was consumed twice"
    for scenario in {c.scenario for c in commits}:
        mine = [c for c in commits if c.scenario == scenario]
        line = [c for c in mine if not c.pending]
        assert line[0].operation == "creation" and line[0].parent_release_id is None
        assert line[0].release_id == release_id(scenario, None, EMPTY_CONTENT_ID, "creation")
        parents = Counter(c.parent_release_id for c in line)
        assert all(n == 1 for n in parents.values()), "two non-pending commits on one parent"
        head = line[0].release_id
        for c in mine[1:]:
            # every commit (pending too) was built on the head of its moment
            assert c.parent_release_id == head
            assert c.release_id == release_id(scenario, head, c.content_id, c.operation)
            if not c.pending:
                head = c.release_id
        assert run.state.get(f"head/{scenario}") == head
    for _, o in run.outputs:
        if isinstance(o, ReleaseRejected) and o.reason == "stale_parent":
            p = next(
                e
                for e in run.inputs
                if isinstance(e, ReleaseProposed) and e.proposal_id == o.proposal_id
            )
            assert p.parent_release_id != o.head_release_id


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.booleans())
def test_chain_is_a_single_line_over_random_proposals(
    items: list[tuple[Any, ...]], created_first: bool
) -> None:
    if created_first:
        items = [("create", "alpha"), ("create", "beta"), *items]
    run = play(items)
    for _, out in run.outputs:
        assert isinstance(out, ReleaseCommitted | ReleaseRejected | ScenarioCreated), out
        note(
            out.reason
            if isinstance(out, ReleaseRejected)
            else f"committed {getattr(out, 'operation', 'creation')}"
        )
    check_chain(run)
    for event in run.inputs:
        run.redeliver(event)


# ---------------------------------------------------------------------------
# Examples

S = "demo"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def start() -> tuple[ReleaseChainProcessor, DictState, str]:
    chain, state = ReleaseChainProcessor(), DictState()
    (creation,) = chain.step(state, created(S, at(0)))
    assert isinstance(creation, ReleaseCommitted)
    assert creation.operation == "creation" and creation.parent_release_id is None
    assert creation.content_id == EMPTY_CONTENT_ID
    return chain, state, creation.release_id


def decide(chain: ReleaseChainProcessor, state: DictState, event: ReleaseProposed) -> Event:
    (out,) = chain.step(state, event)
    return out


def test_a_racing_creation_keeps_the_first_binding() -> None:
    chain, state, root = start()
    assert chain.step(state, created(S, at(1), "other-seed")) == []
    assert state.get(f"head/{S}") == root


def test_a_proposal_on_the_head_commits_and_moves_the_head() -> None:
    chain, state, root = start()
    out = decide(chain, state, proposal(S, "p1", root, "c1", at(1), samples=["s1", "s2"]))
    assert isinstance(out, ReleaseCommitted)
    assert out.release_id == release_id(S, root, "c1", "training")
    assert out.parent_release_id == root
    assert out.sample_ids == ["s1", "s2"]
    assert out.event_id == derived_id("committed", "ev-p1")
    assert json.loads(out.metrics_json) == {"p": "p1"}
    assert state.get(f"head/{S}") == out.release_id


def test_eight_proposers_on_one_parent_commit_exactly_one() -> None:
    chain, state, root = start()
    outs = [decide(chain, state, proposal(S, f"p{i}", root, f"c{i}", at(1))) for i in range(8)]
    winner = outs[0]
    assert isinstance(winner, ReleaseCommitted)
    rejected = [o for o in outs[1:] if isinstance(o, ReleaseRejected)]
    assert len(rejected) == 7 and all(o.reason == "stale_parent" for o in rejected)
    assert {o.head_release_id for o in rejected} == {winner.release_id}
    # a loser rebuilds on the new head and commits
    retry = decide(chain, state, proposal(S, "p1b", winner.release_id, "c1", at(2)))
    assert isinstance(retry, ReleaseCommitted)


def test_unknown_scenario_invalid_operation_and_no_parent() -> None:
    chain, state, root = start()
    out = decide(chain, state, proposal("nowhere", "p1", None, "c1", at(1)))
    assert isinstance(out, ReleaseRejected) and out.reason == "unknown_scenario"
    assert out.head_release_id is None
    out = decide(chain, state, proposal(S, "p2", root, "c1", at(1), operation="creation"))
    assert isinstance(out, ReleaseRejected) and out.reason == "invalid_operation"
    out = decide(chain, state, proposal(S, "p3", None, "c1", at(1)))
    assert isinstance(out, ReleaseRejected) and out.reason == "stale_parent"
    assert out.head_release_id == root


def test_rollback_republishes_earlier_content_as_a_new_release() -> None:
    chain, state, root = start()
    first = decide(chain, state, proposal(S, "p1", root, "c1", at(1)))
    assert isinstance(first, ReleaseCommitted)
    second = decide(chain, state, proposal(S, "p2", first.release_id, "c2", at(2)))
    assert isinstance(first, ReleaseCommitted) and isinstance(second, ReleaseCommitted)
    back = decide(
        chain,
        state,
        proposal(
            S, "p3", second.release_id, "c1", at(3), operation="rollback", target=first.release_id
        ),
    )
    assert isinstance(back, ReleaseCommitted)
    assert back.operation == "rollback" and back.target_release_id == first.release_id
    assert back.release_id == release_id(S, second.release_id, "c1", "rollback")
    assert back.release_id != first.release_id  # history is never rewritten
    assert state.get(f"head/{S}") == back.release_id
    # rolling back to the creation (empty content) works too
    root_back = decide(
        chain,
        state,
        proposal(
            S, "p4", back.release_id, EMPTY_CONTENT_ID, at(4), operation="rollback", target=root
        ),
    )
    assert isinstance(root_back, ReleaseCommitted)


def test_rollback_rejections() -> None:
    chain, state, root = start()
    first = decide(chain, state, proposal(S, "p1", root, "c1", at(1)))
    assert isinstance(first, ReleaseCommitted)
    head = first.release_id
    for pid, target, content, reason in [
        ("p2", None, "c1", "unknown_target"),
        ("p3", "f" * 32, "c1", "unknown_target"),
        ("p4", root, "c1", "content_mismatch"),
    ]:
        out = decide(
            chain,
            state,
            proposal(S, pid, head, content, at(2), operation="rollback", target=target),
        )
        assert isinstance(out, ReleaseRejected) and out.reason == reason, (pid, out)
    assert state.get(f"head/{S}") == head


def test_pending_release_then_promote() -> None:
    chain, state, root = start()
    pending = decide(chain, state, proposal(S, "p1", root, "c1", at(1), pending=True))
    assert isinstance(pending, ReleaseCommitted) and pending.pending
    assert state.get(f"head/{S}") == root  # a pending release does not move the head
    # another pending release on the same head is fine; the same content again is not
    other = decide(chain, state, proposal(S, "p2", root, "c2", at(2), pending=True))
    assert isinstance(other, ReleaseCommitted)
    dup = decide(chain, state, proposal(S, "p3", root, "c1", at(3)))
    assert isinstance(dup, ReleaseRejected) and dup.reason == "duplicate_release"
    promoted = decide(
        chain,
        state,
        proposal(S, "p4", root, "c1", at(4), operation="promote", target=pending.release_id),
    )
    assert isinstance(promoted, ReleaseCommitted)
    assert promoted.release_id == release_id(S, root, "c1", "promote")
    assert state.get(f"head/{S}") == promoted.release_id
    again = decide(
        chain,
        state,
        proposal(
            S,
            "p5",
            promoted.release_id,
            "c1",
            at(5),
            operation="promote",
            target=pending.release_id,
        ),
    )
    assert isinstance(again, ReleaseRejected) and again.reason == "not_pending"
    # the other pending release was built on the old head: promoting it now is stale
    stale = decide(
        chain,
        state,
        proposal(S, "p6", root, "c2", at(6), operation="promote", target=other.release_id),
    )
    assert isinstance(stale, ReleaseRejected) and stale.reason == "stale_parent"
    mismatch = decide(
        chain,
        state,
        proposal(
            S, "p7", promoted.release_id, "c9", at(7), operation="promote", target=other.release_id
        ),
    )
    assert isinstance(mismatch, ReleaseRejected) and mismatch.reason == "content_mismatch"
    not_pending = decide(
        chain,
        state,
        proposal(
            S, "p8", promoted.release_id, EMPTY_CONTENT_ID, at(8), operation="promote", target=root
        ),
    )
    assert isinstance(not_pending, ReleaseRejected) and not_pending.reason == "not_pending"


def test_samples_consumed_by_a_release_are_never_consumed_again() -> None:
    chain, state, root = start()
    first = decide(chain, state, proposal(S, "p1", root, "c1", at(1), samples=["a", "b"]))
    assert isinstance(first, ReleaseCommitted)
    out = decide(chain, state, proposal(S, "p2", first.release_id, "c2", at(2), samples=["c", "b"]))
    assert isinstance(out, ReleaseRejected) and out.reason == "samples_already_consumed"
    # consumed by a pending release counts too
    pend = decide(
        chain, state, proposal(S, "p3", first.release_id, "c3", at(3), pending=True, samples=["d"])
    )
    assert isinstance(pend, ReleaseCommitted)
    out = decide(chain, state, proposal(S, "p4", first.release_id, "c4", at(4), samples=["d"]))
    assert isinstance(out, ReleaseRejected) and out.reason == "samples_already_consumed"


def test_redelivered_and_retried_proposals_are_decided_once() -> None:
    chain, state, root = start()
    p1 = proposal(S, "p1", root, "c1", at(1))
    p2 = proposal(S, "p2", root, "c2", at(1))
    decide(chain, state, p1)
    decide(chain, state, p2)
    before = snapshot(state)
    for event in (p1, p2, created(S, at(0))):
        assert chain.step(state, event) == []
    # the same proposal id in a new event (a retrying trainer) is not decided again
    assert (
        chain.step(
            state, proposal(S, "p2", state.get(f"head/{S}"), "c2", at(5), event_id="another")
        )
        == []
    )
    assert snapshot(state) == before


def test_events_the_chain_does_not_read_are_ignored() -> None:
    chain, state = ReleaseChainProcessor(), DictState()
    other = ReportSubmitted(
        event_id="r",
        scenario=S,
        occurred_at=at(0),
        producer="t",
        score=1.0,
        feedback_json="{}",
        references=[],
        metadata_json="{}",
        content_hash="h",
    )
    assert chain.step(state, other) == []
    assert state.data == {}
