"""Bearer tokens with scopes, kept only as SHA-256 digests and compared in constant time.

Authorisation matrix (docs/security.md "Authorisation"; tested route by route, with every
wrong credential, by tests/api/test_authorization_matrix.py, which fails on a route that
is missing from its table):

- public, no token: ``GET /healthz``, ``/openapi.json``, ``/docs``,
  ``/docs/oauth2-redirect``, ``/redoc``.
- ``inference``, scenario from ``x-reef-scenario``: ``POST /v1/chat/completions``,
  ``/v1/responses``, ``/v1/messages``, ``/v1/messages/count_tokens``; ``GET /v1/models``
  (no scenario: the upstream's list, no Reef data).
- ``report``, ``x-reef-scenario``: ``POST /reef/report``.
- ``report`` or ``read``, ``x-reef-scenario``: ``GET /reef/reports/{id}``.
- ``read``, scenario from the path or ``x-reef-scenario``:
  ``GET /reef/scenarios/{s}/releases``, ``/records``, ``/records/{id}``,
  ``GET /reef/harness``, ``/reef/harness/releases``, ``/versions``, ``/install``,
  ``GET /reef/lfs/{s}/objects/{oid}``,
  ``POST /reef/lfs/{s}/objects/batch`` (download only, for every token).
- ``read``, listing filtered by the allow-list: ``GET /reef/scenarios``,
  ``GET /reef/status`` (a bound token sees no deployment-wide figures).
- ``read``, tokens without an allow-list only: ``GET /metrics`` (spans all scenarios).
- ``admin``, scenario from the path or body: ``POST /reef/scenarios``,
  ``POST /reef/scenarios/{s}/rollback``, ``/promote``,
  ``DELETE /reef/scenarios/{s}/records/{id}`` (erasure).

Scopes are independent (``admin`` does not imply ``read``): a token gets exactly what it
lists; ``REEF_TOKEN`` and a ``REEF_TOKENS`` entry without ``:`` get all four. A scenario
allow-list (``tok:scopes@glob|glob``) is checked after the scope, before the scenario is
looked up, so a restricted token learns nothing about whether another scenario exists
(403 ``scenario_forbidden`` either way). Order of answers: 401 (no or unknown token),
403 ``insufficient_scope``, 400 (malformed scenario name), 403 ``scenario_forbidden``,
then the route's own checks. A rejected request never writes to the log.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from reef.core.errors import ConfigError, RequestError
from reef.settings import AuthSettings

Scope = Literal["inference", "report", "read", "admin"]
ALL_SCOPES: Final[frozenset[Scope]] = frozenset({"inference", "report", "read", "admin"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's digest prefix, scopes and scenario allow-list."""

    name: str
    scopes: frozenset[Scope]
    scenarios: tuple[str, ...] = ("*",)

    @property
    def unrestricted(self) -> bool:
        """True when the token may use every scenario (no allow-list, or ``*`` in it)."""
        return "*" in self.scenarios

    def require(self, *scopes: Scope) -> None:
        """The token must hold at least one of ``scopes``."""
        if self.scopes.isdisjoint(scopes):
            wanted = " or ".join(repr(s) for s in scopes)
            raise RequestError(403, "insufficient_scope", f"this token lacks the {wanted} scope")

    def require_scenario(self, scenario: str) -> None:
        if not self.may_use(scenario):
            raise RequestError(403, "scenario_forbidden", f"this token may not use {scenario!r}")

    def require_unrestricted(self) -> None:
        """For deployment-wide figures (``/metrics``): no scenario allow-list may apply."""
        if not self.unrestricted:
            raise RequestError(
                403, "scenario_forbidden", "this token is bound to scenarios; this route spans all"
            )

    def may_use(self, scenario: str) -> bool:
        return any(fnmatch.fnmatchcase(scenario, pattern) for pattern in self.scenarios)


INSECURE: Final = Principal("insecure", ALL_SCOPES)


@dataclass(frozen=True, slots=True)
class _Grant:
    digest: bytes
    principal: Principal


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenRegistry:
    """Resolves a presented token to a :class:`Principal`; knows no plaintext token."""

    def __init__(self, grants: Iterable[tuple[str, frozenset[Scope], tuple[str, ...]]]) -> None:
        self._grants = [
            _Grant(_digest(token), Principal(_digest(token).hex()[:12], scopes, scenarios))
            for token, scopes, scenarios in grants
        ]

    @property
    def empty(self) -> bool:
        return not self._grants

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise RequestError(401, "missing_token", "missing bearer token")
        presented = _digest(token)
        found: Principal | None = None
        for grant in self._grants:  # no early exit: time does not depend on which token
            if hmac.compare_digest(presented, grant.digest):
                found = grant.principal
        if found is None:
            raise RequestError(401, "invalid_token", "invalid token")
        return found


def parse_token_spec(spec: str) -> list[tuple[str, frozenset[Scope], tuple[str, ...]]]:
    """Parse ``tok:scope+scope[@glob|glob],...``; a token without ``:`` gets every scope."""
    grants = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        token, _, rest = item.partition(":")
        scope_text, _, scenario_text = rest.partition("@")
        scopes: frozenset[str] = (
            frozenset(s for s in scope_text.split("+") if s) if scope_text else ALL_SCOPES
        )
        unknown = scopes - ALL_SCOPES
        if unknown or not token:
            raise ConfigError(f"bad token entry (unknown scopes {sorted(unknown)} or empty token)")
        scenarios = tuple(scenario_text.split("|")) if scenario_text else ("*",)
        grants.append((token, frozenset(_as_scope(s) for s in scopes), scenarios))
    return grants


def _as_scope(name: str) -> Scope:
    for scope in ALL_SCOPES:
        if scope == name:
            return scope
    raise ConfigError(f"unknown scope {name!r}")


def registry_from(auth: AuthSettings) -> TokenRegistry | None:
    """The token registry, or None when running ``--insecure`` with no token at all."""
    grants = parse_token_spec(auth.tokens.get_secret_value())
    if auth.token is not None and auth.token.get_secret_value():
        grants.append((auth.token.get_secret_value(), ALL_SCOPES, ("*",)))
    if not grants:
        if auth.insecure:
            return None
        raise ConfigError(
            "no token configured: set REEF_TOKEN (or REEF_TOKENS), or pass --insecure to run "
            "without authentication"
        )
    return TokenRegistry(grants)
