"""Fixtures of the unit tests, defined in tests/support and re-exported for pytest."""

from __future__ import annotations

from tests.support.embedded_join import log  # noqa: F401
from tests.support.trainer_harness import harness, running  # noqa: F401
