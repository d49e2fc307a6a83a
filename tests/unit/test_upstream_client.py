"""The shared upstream client: what it carries from one caller's request to the next."""

from __future__ import annotations

import httpx

from reef.api.upstream import Upstream
from reef.settings import Settings


async def test_a_cookie_the_upstream_sets_never_rides_on_a_later_request() -> None:
    seen: list[str | None] = []

    def provider(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(
            200,
            json={"ok": True},
            headers={"set-cookie": "affinity=tenant-a; Path=/; Domain=127.0.0.1"},
        )

    upstream = Upstream(
        Settings(upstream_url="http://127.0.0.1:9/v1"), transport=httpx.MockTransport(provider)
    )
    try:
        for _ in range(2):
            request = upstream.build("POST", "/chat/completions", b"{}", {})
            response = await upstream.send(request, stream=False)
            assert response.status_code == 200
            assert response.headers["set-cookie"].startswith("affinity=")  # still relayed
    finally:
        await upstream.aclose()
    assert seen == [None, None]
