"""The limits of the fuzzed server (tests/fuzz/): a small body limit, so bodies "near the
limit" are cheap to generate, and timeouts past which a request counts as a hang."""

from __future__ import annotations

MAX_BODY = 16 * 1024
UPSTREAM_READ_TIMEOUT_S = 20.0
#: a request that takes longer than this is a hang (the server answers in milliseconds)
REQUEST_TIMEOUT_S = 30.0
