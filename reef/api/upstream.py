"""The upstream provider: one pooled HTTP client, credentials injected here only.

Reef only relays to the upstream: it builds one request, reads one reply whole or as a
stream of chunks, and keeps nothing else. :mod:`reef.api.http_client` does exactly that
and no more, since its cost is paid on every request (``docs/performance.md``).

The client's errors are translated once, here: a refused or failed connection → 502
``upstream_unavailable``, a timeout → 504 ``upstream_timeout`` (both before any byte of
the reply reached the client), and a reply that breaks while it is relayed →
:class:`UpstreamBrokeError`, which the relay turns into an incomplete record.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from multidict import CIMultiDictProxy
from starlette.datastructures import Headers

from reef.api.http_client import ConnectFailed, HttpClient, HttpClientError, Reply, TimedOut
from reef.core.errors import RequestError, UpstreamBrokeError
from reef.core.routing import LOGPROBS_HEADER
from reef.settings import RecordingSettings, UpstreamSettings

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
#: the routes whose request has no ``logprobs`` member Reef could set for the token
#: record: Reef asks with a header instead (:data:`reef.core.routing.LOGPROBS_HEADER`;
#: chat completions get ``logprobs`` in the body, as SGLang reads it: reef.api.inference)
HEADER_ASKED_LOGPROBS: Final = frozenset({"/messages", "/responses"})


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One request for the upstream, credentials already in its headers."""

    method: str
    url: str
    body: bytes | None
    headers: dict[str, str]


class UpstreamReply:
    """The upstream's answer: status and headers, its body read whole or streamed once."""

    def __init__(self, reply: Reply, content: bytes | None) -> None:
        self._reply = reply
        self._read = content is not None
        self.status_code: int = reply.status
        self.headers: CIMultiDictProxy[str] = reply.headers
        #: the whole body once read (by :meth:`Upstream.send` or :meth:`aread`)
        self.content: bytes = content if content is not None else b""

    def json(self) -> Any:
        """The body read whole, as JSON (``ValueError`` if it is not)."""
        return json.loads(self.content)

    async def aread(self) -> bytes:
        """Read the rest of a streamed body (a body already read is returned as is)."""
        if not self._read:
            try:
                self.content = await self._reply.read()
            except HttpClientError as exc:
                raise UpstreamBrokeError(f"upstream reply broke: {exc!r}") from exc
            self._read = True
        return self.content

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive."""
        try:
            async for chunk in self._reply.iter_chunks():
                yield chunk
        except HttpClientError as exc:
            raise UpstreamBrokeError(f"upstream stream broke: {exc!r}") from exc

    async def aclose(self) -> None:
        self._reply.release()


class Upstream:
    """Sends provider-native requests to the configured provider."""

    def __init__(self, upstream: UpstreamSettings, recording: RecordingSettings) -> None:
        self.base_url = (upstream.url or "").rstrip("/")
        self.dialect = upstream.dialect
        self.model = upstream.model
        self._key = upstream.api_key.get_secret_value() if upstream.api_key else None
        self._connect_timeout = upstream.connect_timeout_s
        self._read_timeout = upstream.read_timeout_s
        self._max_connections = upstream.max_connections
        #: top logprobs per token to ask an engine for (0: ids and logprobs); None: none
        self._logprobs = (
            recording.top_logprobs if recording.tokens or recording.top_logprobs else None
        )
        self._client: HttpClient | None = None

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    def _pool(self) -> HttpClient:
        """The pooled client, made on first use (it must be made inside the event loop).
        It keeps no cookies: a cookie an upstream sets in one reply must not ride on
        every later request, whoever made it (the reply's Set-Cookie is still relayed to
        its own caller)."""
        if self._client is None:
            self._client = HttpClient(
                limit=self._max_connections,
                connect_timeout=self._connect_timeout,
                read_timeout=self._read_timeout,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def build(
        self, method: str, suffix: str, body: bytes | None, client: Mapping[str, str]
    ) -> UpstreamRequest:
        if not self.configured:
            raise RequestError(502, "no_upstream", "no upstream is configured for this deployment")
        headers = {name: _joined(client, name) for name in FORWARDED_HEADERS if name in client}
        if body is not None:  # Reef parsed it as JSON, whatever the client declared
            headers["content-type"] = "application/json"
        if self._key:
            if self.dialect == "anthropic":
                headers["x-api-key"] = self._key
            else:
                headers["authorization"] = f"Bearer {self._key}"
        if self.dialect == "anthropic" or suffix.startswith("/messages"):
            headers.setdefault("anthropic-version", DEFAULT_ANTHROPIC_VERSION)
        if self._logprobs is not None and suffix in HEADER_ASKED_LOGPROBS:
            headers[LOGPROBS_HEADER] = str(self._logprobs)
        return UpstreamRequest(method, self.base_url + suffix, body, headers)

    async def send(self, request: UpstreamRequest, *, stream: bool) -> UpstreamReply:
        """The reply; read whole unless ``stream`` (then the caller reads and closes it).
        Redirects are not followed: a redirect is the provider's answer, relayed as is."""
        reply: Reply | None = None
        try:
            reply = await self._pool().request(
                request.method, request.url, request.headers, request.body
            )
            if stream:
                return UpstreamReply(reply, None)
            content = await reply.read()
        except ConnectFailed as exc:  # refused, unreachable, DNS, TLS
            raise RequestError(
                502, "upstream_unavailable", f"upstream unreachable: {exc!r}"
            ) from exc
        except TimedOut as exc:
            raise RequestError(504, "upstream_timeout", f"upstream timed out: {exc!r}") from exc
        except HttpClientError as exc:
            raise RequestError(
                502, "upstream_unavailable", f"upstream unreachable: {exc!r}"
            ) from exc
        finally:
            if reply is not None and not stream:
                reply.release()
        return UpstreamReply(reply, content)


def _joined(client: Mapping[str, str], name: str) -> str:
    """A header sent on several lines (``anthropic-beta: a`` and ``anthropic-beta: b``) as
    one comma-separated value, which means the same (RFC 9110, 5.3)."""
    if isinstance(client, Headers):
        return ", ".join(client.getlist(name))
    return client[name]


def relayed_status(upstream_status: int) -> int:
    """Upstream 4xx keep their code (others become 400); upstream 5xx become 502."""
    if upstream_status >= 500:
        return 502
    if upstream_status in (400, 401, 403, 404, 408, 409, 413, 422, 429):
        return upstream_status
    return 400
