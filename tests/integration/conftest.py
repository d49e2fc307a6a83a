"""Fixtures of the integration tests, defined in tests/support and re-exported for pytest."""

from __future__ import annotations

from tests.support.embedded_join import log  # noqa: F401
