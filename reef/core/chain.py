"""The release chain: one line of releases per scenario, advanced by compare-and-swap.

Inputs ``reef.scenarios`` (the creation release) and ``reef.release-proposals``; output
``reef.releases``. A proposal commits only if the parent it names is still the head;
otherwise it is rejected as ``stale_parent`` and never forced. Rollback and promote
republish an earlier release's content as a new release, so history is never rewritten.
A release id hashes (scenario, parent, content, operation): the chain is tamper-evident.
Samples consumed by a committed release can never be consumed by another.

A held (``pending``) training proposal may carry a rollout policy (``rollout_json``, the
recipe's ``rollout``): its commit and the ``RolloutStarted`` of its rollout are one step's
output, so the candidate and its trial are appended together or not at all. A policy that
does not parse or that :meth:`reef.core.rollouts.RolloutPolicy.problem` refuses rejects
the proposal (``invalid_rollout``). Whether the start applies is the rollouts fold's
decision (:func:`reef.core.rollouts.validate`: e.g. a rollout already live refuses it);
the chain does not fold rollouts, and a refused start leaves the candidate held.
"""

from __future__ import annotations

import json

from reef.core import topics
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    RolloutStarted,
    ScenarioCreated,
)
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, release_id
from reef.core.rollouts import RolloutPolicy
from reef.core.state import KeyValueState

PRODUCER = "reef-chain"
OPERATIONS = ("training", "rollback", "promote")


class ReleaseChainProcessor:
    name = "chain"
    inputs = (topics.SCENARIOS, topics.RELEASE_PROPOSALS)
    output = topics.RELEASES

    def step(self, state: KeyValueState, event: Event) -> list[Event]:
        if isinstance(event, ScenarioCreated):
            return self._created(state, event)
        if isinstance(event, ReleaseProposed):
            if state.get(f"proposal/{event.proposal_id}") is not None:
                return []  # redelivered: already decided
            decision = self._decide(state, event)
            state.set(f"proposal/{event.proposal_id}", decision.type_name())
            if isinstance(decision, ReleaseCommitted) and event.rollout_json is not None:
                return [decision, _rollout_start(decision, rollout_policy(event.rollout_json))]
            return [decision]
        return []

    def _created(self, state: KeyValueState, event: ScenarioCreated) -> list[Event]:
        if state.get(f"head/{event.scenario}") is not None:
            return []  # a racing replica's creation: the first binding stands
        content = event.seed_content_id or EMPTY_CONTENT_ID
        state.set(f"head/{event.scenario}", event.initial_release_id)
        state.set(
            f"release/{event.scenario}/{event.initial_release_id}",
            {"content_id": content, "pending": False},
        )
        return [
            ReleaseCommitted(
                event_id=derived_id("committed", event.event_id),
                scenario=event.scenario,
                occurred_at=event.occurred_at,
                producer=PRODUCER,
                release_id=event.initial_release_id,
                proposal_id=event.event_id,
                content_id=content,
                operation="creation",
            )
        ]

    def _decide(self, state: KeyValueState, p: ReleaseProposed) -> Event:
        head = state.get(f"head/{p.scenario}")
        if head is None:
            return _rejected(p, "unknown_scenario", None)
        if p.operation not in OPERATIONS:
            return _rejected(p, "invalid_operation", head)
        if p.parent_release_id != head:
            return _rejected(p, "stale_parent", head)
        reason = self._check_target(state, p) or _rollout_refusal(p)
        if reason is not None:
            return _rejected(p, reason, head)
        if any(state.get(f"sample/{p.scenario}/{s}") is not None for s in p.sample_ids):
            return _rejected(p, "samples_already_consumed", head)
        new_id = release_id(p.scenario, head, p.content_id, p.operation)
        if state.get(f"release/{p.scenario}/{new_id}") is not None:
            return _rejected(p, "duplicate_release", head)
        return self._commit(state, p, new_id, head)

    def _check_target(self, state: KeyValueState, p: ReleaseProposed) -> str | None:
        if p.operation == "training":
            return None
        target = (
            state.get(f"release/{p.scenario}/{p.target_release_id}")
            if p.target_release_id
            else None
        )
        if target is None:
            return "unknown_target"
        if p.operation == "promote" and not target["pending"]:
            return "not_pending"
        if target["content_id"] != p.content_id:
            return "content_mismatch"
        return None

    def _commit(self, state: KeyValueState, p: ReleaseProposed, new_id: str, head: str) -> Event:
        state.set(
            f"release/{p.scenario}/{new_id}", {"content_id": p.content_id, "pending": p.pending}
        )
        for sample in p.sample_ids:
            state.set(f"sample/{p.scenario}/{sample}", new_id)
        if p.operation == "promote" and p.target_release_id:
            state.set(
                f"release/{p.scenario}/{p.target_release_id}",
                {"content_id": p.content_id, "pending": False, "promoted_to": new_id},
            )
        if not p.pending:
            state.set(f"head/{p.scenario}", new_id)
        return ReleaseCommitted(
            event_id=derived_id("committed", p.event_id),
            scenario=p.scenario,
            occurred_at=p.occurred_at,
            producer=PRODUCER,
            release_id=new_id,
            proposal_id=p.proposal_id,
            parent_release_id=head,
            content_id=p.content_id,
            operation=p.operation,
            target_release_id=p.target_release_id,
            metrics_json=p.metrics_json,
            evaluation_json=p.evaluation_json,
            sample_ids=list(p.sample_ids),
            pending=p.pending,
        )


def rollout_policy(rollout_json: str) -> RolloutPolicy:
    """The policy a proposal's ``rollout_json`` names (``ValueError``/``TypeError`` if it
    is not one)."""
    fields = json.loads(rollout_json)
    if not isinstance(fields, dict):
        raise TypeError("a rollout policy is a JSON object")
    return RolloutPolicy(**fields)


def _rollout_refusal(p: ReleaseProposed) -> str | None:
    if p.rollout_json is None:
        return None
    if not p.pending or p.operation != "training":
        return "invalid_rollout"  # only a held training candidate is tried live
    try:
        problem = rollout_policy(p.rollout_json).problem()
    except (ValueError, TypeError):
        return "invalid_rollout"
    return None if problem is None else "invalid_rollout"


def _rollout_start(committed: ReleaseCommitted, policy: RolloutPolicy) -> RolloutStarted:
    """The start of the rollout a held candidate was proposed with; its id derives from
    the release, so a redone step starts the same rollout."""
    rollout_id = derived_id("rollout", committed.scenario, committed.release_id)
    return RolloutStarted(
        event_id=derived_id("rollout-started", committed.scenario, rollout_id),
        scenario=committed.scenario,
        occurred_at=committed.occurred_at,
        producer=PRODUCER,
        rollout_id=rollout_id,
        candidate_release_id=committed.release_id,
        head_release_id=committed.parent_release_id or "",
        mode=policy.mode,
        share=policy.share,
        min_exchanges=policy.min_exchanges,
        max_duration_s=policy.max_duration_s,
        alpha=policy.alpha,
        requested_by=committed.proposal_id,
        latency_slo_ms=policy.latency_slo_ms,
    )


def _rejected(p: ReleaseProposed, reason: str, head: str | None) -> ReleaseRejected:
    return ReleaseRejected(
        event_id=derived_id("rejected-proposal", p.event_id),
        scenario=p.scenario,
        occurred_at=p.occurred_at,
        producer=PRODUCER,
        proposal_id=p.proposal_id,
        reason=reason,
        head_release_id=head,
    )
