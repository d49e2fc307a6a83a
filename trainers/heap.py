"""Hand the heap memory a training step freed back to the operating system.

A training step allocates and frees hundreds of MB (model copies, optimizer state,
activations) from worker threads; glibc keeps freed chunks in per-thread arenas, so a
long-lived trainer's RSS creeps up step after step although nothing is live. After each
step the trainer asks glibc to trim (``malloc_trim(0)``; ctypes releases the GIL for the
call). No ``gc.collect()`` here: run from a worker thread it would finalize the event
loop's objects (locks, async generators) off the loop's thread. Elsewhere (musl, macOS)
this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def release_freed_memory() -> bool:
    """Return freed heap pages to the OS; False where unsupported."""
    trim = _malloc_trim()
    if trim is None:
        return False
    return bool(trim(0))
