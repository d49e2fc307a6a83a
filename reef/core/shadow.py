"""Shadow copies: a rollout's candidate answers a copy of a served request, unseen.

During a ``shadow`` rollout (:mod:`reef.core.rollouts`) the route of an exchange may name
a shadow release (:func:`reef.core.routing.route`). The rules of its copy:

1. **Only a served exchange is copied, after it is recorded.** The client gets the
   head's answer, receipt and headers exactly as without a rollout; the copy is sent only
   once the served ``InferenceRecorded`` is durable, so it can neither delay nor alter the
   reply, and it always has a record to link to. A relayed upstream error (no record) and
   ``count_tokens`` (no answer to compare) are not copied.
2. **The copy is buffered**: ``stream`` is false and ``stream_options`` dropped, whatever
   the client asked, so the candidate's whole answer is one body to record, with nothing
   to drain (:func:`buffered_copy`).
3. **A harness candidate's instructions replace the client's.** When the candidate's
   content has a ``system_prompt.md``, it replaces the request's system prompt (the first
   ``system``/``developer`` message of a chat, ``system`` of a message, ``instructions``
   of a response); a model candidate is named to the engine instead
   (``x-reef-serve-release``), the request unchanged.
4. **One record per copy, linked and derived**: an ``InferenceRecorded`` whose
   ``shadow_of`` is the served receipt and whose id is :func:`shadow_receipt` of it (the
   scenario's tag kept, so the join and the erase route recognise it as the scenario's).
   A copy that fails (upstream error, broken connection, timeout) is recorded incomplete
   with the error: the controller counts it against the candidate. Its receipt is never
   sent to any client.
5. **Scored, never trained.** A shadow record is no turn of any session (sessions and
   session merging skip it), but a report may quote it (an offline grader reading the
   log) and the join makes that a sample as usual, so the rollout controller can score the
   candidate. No such sample trains: :func:`trains` is the one rule a trainer asks before a
   sample is admitted (``trainers.intake``), and the join marks every shadow exchange of
   a trajectory (``shadow_of``) so the rule reads it from the sample alone.
"""

from __future__ import annotations

import json
from typing import Any, Final

from reef.core.events import SampleJoined
from reef.core.ids import derived_id

#: routes whose exchanges are never copied (no answer to compare)
NOT_COPIED: Final = frozenset({"/v1/messages/count_tokens"})
#: the harness file whose text is a harness candidate's system prompt
SYSTEM_PROMPT_FILE: Final = "system_prompt.md"
#: the trajectory key the join sets on a shadow exchange (the served receipt)
SHADOW_KEY: Final = "shadow_of"
SCENARIO_TAG_LENGTH: Final = 8


def shadow_receipt(served: str) -> str:
    """The receipt of ``served``'s shadow copy: the scenario tag of ``served``, then 24
    hex characters derived from it (one copy per served exchange)."""
    return served[:SCENARIO_TAG_LENGTH] + derived_id("shadow", served)[SCENARIO_TAG_LENGTH:]


def buffered_copy(body: dict[str, Any], route: str, system_prompt: str | None) -> dict[str, Any]:
    """The body sent to the candidate (rules 2 and 3); ``body`` is left unchanged."""
    copy = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    if "stream" in body:
        copy["stream"] = False
    if system_prompt is None:
        return copy
    if route == "/v1/messages":
        copy["system"] = system_prompt
    elif route == "/v1/responses":
        copy["instructions"] = system_prompt
    else:
        copy["messages"] = _with_system(body.get("messages"), system_prompt)
    return copy


def _with_system(messages: Any, system_prompt: str) -> list[Any]:
    """Chat messages with the first system (or developer) message's text replaced, or
    the prompt put first when there is none."""
    listed = list(messages) if isinstance(messages, list) else []
    instruction = {"role": "system", "content": system_prompt}
    for index, message in enumerate(listed):
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            listed[index] = {**message, "content": system_prompt}
            return listed
    return [instruction, *listed]


def trajectory_shadows(trajectory_json: str) -> list[str]:
    """The receipts of the shadow exchanges in a sample's trajectory (rule 5)."""
    try:
        trajectory = json.loads(trajectory_json)
    except ValueError:
        return []
    if not isinstance(trajectory, list):
        return []
    return [
        str(step["receipt"])
        for step in trajectory
        if isinstance(step, dict) and step.get(SHADOW_KEY) is not None
    ]


def trains(sample: SampleJoined) -> bool:
    """Whether a sample may train at all: never when it holds a shadow exchange."""
    return not trajectory_shadows(sample.trajectory_json)
