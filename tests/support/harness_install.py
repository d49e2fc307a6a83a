"""Running a harness install script with ``sh`` as a user would, and reading what it wrote;
the seed harness of the shared ``harness_server`` (tests/e2e/conftest.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from reef.harness import RECORD_FILE

#: the files every scenario of ``harness_server`` starts from
SEED = {"system_prompt.md": "You are the seed agent.\n", "skills/greet.md": "# Greet\nSay hi.\n"}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """``files`` ({relative path: text}) written under ``root``; ``root``."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def run_sh(
    script: str, dest: Path, home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``sh -s -- [args] DEST`` with the script on stdin, in a temporary HOME."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return subprocess.run(
        ["sh", "-s", "--", *args, str(dest)],
        input=script,
        capture_output=True,
        text=True,
        env={**environment, **(env or {})},
        cwd=home,
        timeout=60,
        check=False,
    )


def tree_of(dest: Path) -> dict[str, str]:
    """Every file under ``dest`` but the install record, as {relative path: text}."""
    if not dest.exists():
        return {}
    return {
        p.relative_to(dest).as_posix(): p.read_bytes().decode("utf-8")
        for p in sorted(dest.rglob("*"))
        if p.is_file() and p.name != RECORD_FILE
    }
