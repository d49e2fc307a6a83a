"""Which release serves an exchange during a rollout: the same answer on every replica.

:func:`route` is a function of (scenario, routing key, the folded rollout state) and
nothing else: no clock, no randomness, no coordination. Every API replica folds the same
``reef.releases`` (:class:`reef.core.rollouts.RolloutBook`), so every replica sends a
session to the same release, and a session keeps its release for as long as the rollout
is active (the draw depends on the rollout, not on when the session arrives). When the
rollout is decided every session moves to the one release left serving.

The draw is an 8-byte BLAKE2b digest (personalised ``reef-route``) of the length-prefixed
(scenario, rollout id, routing key), as a big-endian integer in [0, 2^64); the
candidate takes the key when the draw is below ``share * 2^64``. A cryptographic hash
(never Python's ``hash()``, which is salted per process) gives the same draw in every
process and on every machine, a candidate share within sampling error of ``share``, and
draws for two rollouts of one scenario that are independent: each rollout picks its own
sessions, so a rollout that follows a rolled back one is not tried on the same users.

The routing key is the session tag when the client sent one (``x-reef-tag-session``),
else the receipt id: an untagged exchange is routed on its own, so the turns of an
untagged conversation may be answered by different arms (tag sessions to keep them on
one).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from reef.core.live_decision import Arm
from reef.core.rollouts import RolloutBook

#: the draw's range: 2^64, the 8 bytes taken from the hash
DRAWS: Final = 1 << 64
#: the header the API names a routed release in when it is not the head, so an engine
#: that holds it in a named slot (Reef's engine: reef.engine.model) answers with it
SERVE_RELEASE_HEADER: Final = "x-reef-serve-release"
#: how ``reef engine`` (and SGLang through meta_info) reports the weights that answered
WEIGHT_VERSION_HEADER: Final = "x-weight-version"
#: the header the API asks for the token record in on the routes whose request has no
#: ``logprobs`` member to set (Anthropic messages, Responses): its value is the number of
#: top logprobs per token (0: ids and logprobs only). Reef's engine answers it with
#: ``meta_info``; other providers ignore an unknown header.
LOGPROBS_HEADER: Final = "x-reef-logprobs"


@dataclass(frozen=True, slots=True)
class Route:
    """Who answers one exchange: the arm and release returned to the client, and the
    release that answers a shadow copy (never returned), if any."""

    arm: Arm
    release_id: str
    shadow_release_id: str | None = None
    #: the rollout that decided this route (None: no rollout in effect)
    rollout_id: str | None = None


def routing_key(session_tag: str | None, receipt_id: str) -> str:
    """The session tag if present, else the receipt id (distinct namespaces)."""
    return f"session:{session_tag}" if session_tag else f"receipt:{receipt_id}"


def draw(scenario: str, rollout_id: str, key: str) -> int:
    """A uniform draw in [0, 2^64), fixed by its three inputs (length-prefixed, so no two
    triples hash the same text)."""
    text = f"{len(scenario)}:{scenario}{len(rollout_id)}:{rollout_id}{key}"
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=b"reef-route").digest()
    return int.from_bytes(digest, "big")


def takes(share: float, value: int) -> bool:
    """Whether a draw falls in the candidate's share (``share * 2^64`` is exact in floats)."""
    return value < int(share * DRAWS)


def route(scenario: str, key: str, book: RolloutBook) -> Route | None:
    """The route of an exchange of ``scenario`` with routing ``key``; None while the
    book knows no head for the scenario."""
    view = book.scenario(scenario)
    if view is None or view.head is None:
        return None
    promoted = view.promotion_pending
    if promoted is not None:  # decided, not yet committed: the candidate answers all
        return Route("candidate", promoted.candidate_release_id, None, promoted.rollout_id)
    rollout = view.active
    if rollout is None:
        return Route("head", view.head)
    chosen = takes(rollout.policy.share, draw(scenario, rollout.rollout_id, key))
    if rollout.policy.mode == "shadow":
        shadow = rollout.candidate_release_id if chosen else None
        return Route("head", rollout.head_release_id, shadow, rollout.rollout_id)
    if chosen:
        return Route("candidate", rollout.candidate_release_id, None, rollout.rollout_id)
    return Route("head", rollout.head_release_id, None, rollout.rollout_id)
