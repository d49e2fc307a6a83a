"""``tutorials/harness_evolve/run.sh`` runs verbatim, as the seed quickstart says, in its
stand-in mode (no provider configured): the loop releases a harness that lifts the
held-out score, and the install script delivers it to a Claude Code folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reef.harness import RECORD_FILE, InstallRecord
from reef.testing.harness_upstream import RULE
from reef.testing.servers import clean_env

TUTORIAL = Path(__file__).resolve().parents[2] / "tutorials" / "harness_evolve" / "run.sh"

pytestmark = pytest.mark.slow


def test_the_harness_tutorial_runs_on_the_stand_in(tmp_path: Path) -> None:
    # no REEF_* from the test's environment: no provider, so the stand-in
    env = clean_env({"REEF_TUTORIAL_DIR": str(tmp_path), "REEF_TUTORIAL_WAIT_S": "120"})
    done = subprocess.run(
        ["sh", str(TUTORIAL)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "running on the local scripted stand-in" in output
    assert "gate score 1.00 vs head" in output
    assert "behind: the head is release" in output and "update with: reef harness install" in output
    assert "before -> after (local scripted stand-in, no real model): 0.00 -> 1.00" in output
    assert (tmp_path / "before").read_text() == "0.00\n"
    assert (tmp_path / "after").read_text() == "1.00\n"
    home = tmp_path / "claude"
    assert RULE in (home / "CLAUDE.md").read_text()
    record = InstallRecord.parse((home / RECORD_FILE).read_text())
    assert record.adapter == "claude" and record.scenario.startswith("tutorial-")
