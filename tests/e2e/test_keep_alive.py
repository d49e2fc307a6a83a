"""``reef serve`` keeps an idle client connection longer than its clients keep theirs.

httpx, and the OpenAI and Anthropic SDKs built on it, reuse an idle connection for up to
5 s. A server that closes idle connections after the same 5 s (uvicorn's default) races
them: a request sent on a connection the server is closing fails with a read error that
the client does not retry. So the server's idle timeout is well above theirs
(:data:`reef.cli.options.SERVER_KEEP_ALIVE_S`)."""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit

from tests.support.reef_server import ReefServer

#: a little longer than the clients' 5 s idle expiry
IDLE_S = 6.5


def test_an_idle_connection_outlives_the_clients_idle_expiry(harness_server: ReefServer) -> None:
    url = urlsplit(harness_server.base_url)
    assert url.hostname is not None and url.port is not None
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request("GET", "/healthz")
        first = connection.getresponse()
        first.read()
        assert first.status == 200
        assert first.getheader("connection", "keep-alive").lower() != "close"
        time.sleep(IDLE_S)
        # the same socket: http.client does not reconnect a connection the server closed,
        # it raises RemoteDisconnected
        connection.request("GET", "/healthz")
        second = connection.getresponse()
        second.read()
        assert second.status == 200
    finally:
        connection.close()
