"""A recipe's ``rollout``: its accepted candidates are tried on live traffic first.

With ``rollout`` set, a candidate the gate selects is proposed *held* with this policy;
the chain commits it and starts its rollout in one step (:mod:`reef.core.chain`), the
rollout controller promotes or rolls it back on live outcomes
(:mod:`reef.core.rollout_control`), and the trainer proposes the scenario's next
candidate only once the rollout has ended. Needs ``REEF_ROLLOUTS=true`` where the API
and the processors run (the controller decides; the API routes).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Literal

from pydantic import Field, model_validator

from recipes.strict import StrictModel
from reef.core.rollouts import RolloutPolicy


class RolloutConfig(StrictModel):
    """The policy every accepted candidate of the recipe is rolled out under."""

    mode: Literal["canary", "shadow"] = Field(
        default="canary",
        description="canary: the candidate answers a share of the sessions; shadow: it "
        "answers a copy of a share in the background, never returned.",
    )
    share: float = Field(default=0.1, description="Share of the sessions routed to it.")
    min_exchanges: int = Field(
        default=100, description="Live outcomes per arm before the test may decide."
    )
    max_duration_s: float = Field(
        default=86_400.0, description="A rollout still undecided after this is rolled back."
    )
    alpha: float = Field(default=0.05, description="The false-promotion rate the test keeps.")
    latency_slo_ms: float | None = Field(
        default=None,
        description="Latency objective: a candidate proven slower than it more often than "
        "the head is rolled back (unset: latency is shown, not tested).",
    )

    @model_validator(mode="after")
    def _valid_policy(self) -> RolloutConfig:
        problem = self.policy().problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    def policy(self) -> RolloutPolicy:
        return RolloutPolicy(
            mode=self.mode,
            share=self.share,
            min_exchanges=self.min_exchanges,
            max_duration_s=self.max_duration_s,
            alpha=self.alpha,
            latency_slo_ms=self.latency_slo_ms,
        )

    def policy_json(self) -> str:
        """The policy as a proposal carries it (``ReleaseProposed.rollout_json``)."""
        return json.dumps(asdict(self.policy()), sort_keys=True)
