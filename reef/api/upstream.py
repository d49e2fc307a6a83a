"""The upstream provider: one pooled httpx client, credentials injected here only.

The client's transport is aiohttp's (``httpx-aiohttp``): on this workload it serves
several times the requests/s of httpcore's pool at a third of the latency, while the
code keeps httpx's request/response types (and ``httpx.MockTransport`` in unit tests).

httpx errors are translated once, here: connect failures → 502 ``upstream_unavailable``,
timeouts → 504 ``upstream_timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from http.cookiejar import DefaultCookiePolicy
from typing import Final

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from reef.core.errors import RequestError
from reef.settings import Settings

#: client headers relayed upstream; everything else (Authorization, x-api-key, cookies,
#: x-reef-*) stays with Reef.
FORWARDED_HEADERS: Final = (
    "content-type",
    "accept",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "openai-organization",
    "openai-project",
)
DEFAULT_ANTHROPIC_VERSION: Final = "2023-06-01"


class Upstream:
    """Sends provider-native requests to the configured provider."""

    def __init__(
        self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.base_url = (settings.upstream_url or "").rstrip("/")
        self.dialect = settings.upstream_dialect
        self.model = settings.upstream_model
        self._key = (
            settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        )
        timeout = httpx.Timeout(
            settings.upstream_read_timeout_s, connect=settings.upstream_connect_timeout_s
        )
        limits = httpx.Limits(
            max_connections=settings.upstream_max_connections,
            max_keepalive_connections=settings.upstream_max_connections,
        )
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport or AiohttpTransport(limits=limits, trust_env=False),
        )
        # the client is shared by every caller of the deployment: a cookie an upstream
        # sets in one reply must not ride on every later request, whoever made it (the
        # reply's Set-Cookie is still relayed to its own caller)
        self._client.cookies.jar.set_policy(DefaultCookiePolicy(allowed_domains=[]))

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    async def aclose(self) -> None:
        await self._client.aclose()

    def build(
        self, method: str, suffix: str, body: bytes | None, client: Mapping[str, str]
    ) -> httpx.Request:
        if not self.configured:
            raise RequestError(502, "no_upstream", "no upstream is configured for this deployment")
        headers = {name: client[name] for name in FORWARDED_HEADERS if name in client}
        if body is not None:  # Reef parsed it as JSON, whatever the client declared
            headers["content-type"] = "application/json"
        if self._key:
            if self.dialect == "anthropic":
                headers["x-api-key"] = self._key
            else:
                headers["authorization"] = f"Bearer {self._key}"
        if self.dialect == "anthropic" or suffix.startswith("/messages"):
            headers.setdefault("anthropic-version", DEFAULT_ANTHROPIC_VERSION)
        return self._client.build_request(
            method, self.base_url + suffix, content=body, headers=headers
        )

    async def send(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        try:
            return await self._client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            if _refused(exc):
                raise RequestError(
                    502, "upstream_unavailable", f"upstream unreachable: {exc!r}"
                ) from exc
            raise RequestError(504, "upstream_timeout", f"upstream timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise RequestError(
                502, "upstream_unavailable", f"upstream unreachable: {exc!r}"
            ) from exc


def _refused(exc: httpx.TimeoutException) -> bool:
    """httpx-aiohttp reports a refused connection as ConnectTimeout; tell them apart."""
    cause = exc.__cause__
    return isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(
        cause, aiohttp.ServerTimeoutError
    )


def relayed_status(upstream_status: int) -> int:
    """Upstream 4xx keep their code (others become 400); upstream 5xx become 502."""
    if upstream_status >= 500:
        return 502
    if upstream_status in (400, 401, 403, 404, 408, 409, 413, 422, 429):
        return upstream_status
    return 400
