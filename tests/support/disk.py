"""A full disk on demand: a tiny tmpfs (needs root) and a writer that fills it."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def fill_disk(path: Path) -> None:
    """Write until the file system is full, down to the last free byte."""
    with path.open("wb", buffering=0) as out:
        for size in (1 << 16, 1 << 12, 1):
            block = b"\0" * size
            try:
                while True:
                    out.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str = "4m") -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)
