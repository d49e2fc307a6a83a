"""The release chain: one line of releases per scenario, advanced by compare-and-swap.

Inputs ``reef.scenarios`` (the creation release) and ``reef.release-proposals``; output
``reef.releases``. A proposal commits only if the parent it names is still the head;
otherwise it is rejected as ``stale_parent`` and never forced. Rollback and promote
republish an earlier release's content as a new release, so history is never rewritten.
A release id hashes (scenario, parent, content, operation): the chain is tamper-evident.
Samples consumed by a committed release can never be consumed by another.
"""

from __future__ import annotations

from reef.core import topics
from reef.core.events import (
    Event,
    ReleaseCommitted,
    ReleaseProposed,
    ReleaseRejected,
    ScenarioCreated,
)
from reef.core.ids import EMPTY_CONTENT_ID, derived_id, release_id
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
        reason = self._check_target(state, p)
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
