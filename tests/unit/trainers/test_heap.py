"""The trainer's heap release after a step."""

from __future__ import annotations

import platform

from trainers.heap import release_freed_memory


def test_freed_memory_is_returned_on_glibc() -> None:
    chunks = [bytearray(64 * 1024) for _ in range(2000)]  # ~128 MB of small-ish blocks
    del chunks
    released = release_freed_memory()
    # glibc answers 1 when it released memory; other C libraries have no malloc_trim
    assert released is (platform.libc_ver()[0] == "glibc")
