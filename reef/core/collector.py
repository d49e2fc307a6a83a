"""The cyclic garbage collector held off while a host or replay folds a batch of events.

A fold allocates a great deal (decoded events, state values, outputs) and keeps most of it
until the batch is committed: none of it cyclic. A collection triggered meanwhile walks
those young objects, and every few hundred thousand allocations a full one walks the whole
state held in memory again (a replay's growing tables, a host's state cache), work that
grows with the state and finds nothing to free. Paused over one batch,
the collector runs once the batch is over, on what it left: cyclic garbage is still
collected, only later.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside; the previous setting is restored on exit (so a
    pause nested in another, or taken where the collector was off, leaves it off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
