"""Keeping an in-process service alive: run it, and after a failure log it and run it again.

The trainer and the judge run as tasks of ``reef serve`` (embedded log). A failure is
logged, shown in the service's status (``on_failure``) and followed by a restart after an
exponential backoff; the service resumes from its committed offsets, as after a crash. A
stop (the task cancelled) always ends it, also when the cancellation surfaces as another
exception: restarting into a stop would hang the server's shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

logger = logging.getLogger("reef.supervision")

FIRST_BACKOFF_S: Final = 1.0
MAX_BACKOFF_S: Final = 60.0


async def supervise(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    on_failure: Callable[[str], None],
    before_restart: Callable[[], None] = lambda: None,
    first_backoff_s: float = FIRST_BACKOFF_S,
) -> None:
    """Run ``run`` until it returns or the task is cancelled, restarting it on failure."""
    backoff = first_backoff_s
    while True:
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the supervisor's job: keep the service alive, loudly
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the stop arrived as this failure: stop, never restart into it
            on_failure(f"{type(exc).__name__}: {exc}")
            logger.exception("%s failed; restarting in %.0fs", name, backoff)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
        before_restart()
