"""Pinning an inference to one release of its scenario (``x-reef-release-id: R``).

A client that runs a pinned harness (``GET /reef/harness?release_id=R``, or an install
of R) says so with the header, and the exchange is recorded under R instead of the
head; the published client's ``x-reef-artifact-version`` is read the same way. The
release must be one of the scenario's (pending ones included: trying a held release
is what review is for); an unknown or another scenario's release is the same 409
(``unknown_release``), answered in the route's dialect, before anything is written
or a scenario is created.
"""

from __future__ import annotations

from typing import Final

from fastapi import Request

from reef.api.context import AppContext
from reef.core.errors import RequestError

PIN_HEADERS: Final = ("x-reef-release-id", "x-reef-artifact-version")


def pinned_release(request: Request, ctx: AppContext, scenario: str) -> str | None:
    """The release the request pins, checked against the scenario's chain; None if unpinned."""
    named = {request.headers[h].strip() for h in PIN_HEADERS if h in request.headers}
    if not named:
        return None
    if len(named) > 1:
        raise RequestError(400, "conflicting_pins", "the pin headers name different releases")
    wanted = named.pop()
    view = ctx.projection.state.scenarios.get(scenario)
    if view is not None and any(r.release_id == wanted for r in view.releases):
        return wanted
    # another scenario's release answers the same as an unknown one: a token bound to
    # this scenario learns nothing about the others
    raise RequestError(409, "unknown_release", f"{wanted!r} is not a release of {scenario!r}")
