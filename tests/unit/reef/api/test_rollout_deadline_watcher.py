"""The API's deadline watcher (reef.api.rollout_deadlines) outlives a failed check:
whatever a check raises, the next tick checks again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reef.api import rollout_deadlines
from reef.core.errors import LogUnavailableError


async def test_a_failed_check_of_any_kind_is_retried_at_the_next_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures: list[Exception] = [LogUnavailableError("log down"), RuntimeError("a defect")]
    checks = 0

    async def check(ctx: Any) -> int:
        nonlocal checks
        checks += 1
        if failures:
            raise failures.pop(0)
        return 0

    monkeypatch.setattr(rollout_deadlines, "append_overdue", check)
    watcher = asyncio.create_task(rollout_deadlines.watch_rollout_deadlines(None, 0.01))  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        while checks < 3:
            await asyncio.sleep(0.01)
    assert not watcher.done()
    watcher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watcher
