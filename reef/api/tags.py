"""An exchange's tags: the client's ``x-reef-tag-*`` headers over what its agent said.

Three sources, highest precedence first:

1. the client's own ``x-reef-tag-<name>`` headers (:func:`reef.api.inputs.tags_of`);
2. the agent CLI's session headers and its subagent mark (:mod:`reef.core.agent_headers`),
   unless the deployment ignores them (``agent_session_headers``);
3. while sessions are tracked, a side call recognised by its shape
   (:mod:`reef.core.side_calls`): ``turn-type: side`` and its ``side-kind``, unless the
   client set ``turn-type`` itself; and a history that says it was compacted
   (``history: compacted``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request

from reef.api.inputs import tags_of
from reef.core import agent_headers, side_calls


def exchange_tags(
    request: Request, body: Any, *, agent_sessions: bool, classify: bool
) -> dict[str, str]:
    """The tags recorded with this exchange (and routed on: ``session``)."""
    headers = dict(request.headers.items())  # one pass, then a look-up per table row
    return tags_from(
        headers, tags_of(request), body, agent_sessions=agent_sessions, classify=classify
    )


def tags_from(
    headers: Mapping[str, str],
    explicit: dict[str, str],
    body: Any,
    *,
    agent_sessions: bool,
    classify: bool,
) -> dict[str, str]:
    """The tags of a request with these ``headers`` (lowercase names), the client's
    ``explicit`` tags and this ``body`` (the precedence in the module docstring)."""
    derived: dict[str, str] = {}
    if agent_sessions:
        derived = {**agent_headers.body_tags(body), **agent_headers.agent_tags(headers.get)}
    tags = agent_headers.with_explicit(derived, explicit)
    if not classify:
        return tags
    if side_calls.TURN_TYPE_TAG not in explicit:
        kind = side_calls.side_kind(body, tags)
        if kind is not None:
            tags = {**side_calls.side_tags(kind), **tags}
    return {**side_calls.history_tags(body), **tags}
