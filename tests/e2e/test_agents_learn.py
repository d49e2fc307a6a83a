"""The closed loop with the real CLIs, shortened: Claude Code and Codex, each served by
Reef's engine on the embedded log, succeed on held-out tasks after training on their own
sessions (Claude Code one round, Codex two).

This is ``bench/agents.py`` itself, its results written as JSON: the pinned CLI works on
"create a file NAME containing WORD" tasks in its working directory; success is checked
on disk; a checker reports each training session's outcome with ``reef_client``, quoting
its receipts, with the call that would have succeeded as the correction (Claude Code's
``Write``, Codex's ``exec_command`` with ``echo WORD > NAME``); the ``sft`` trainer
trains a candidate, the gate decides, the sidecar hot-loads the release, and held-out
sessions (tasks whose words no training task has) run again.

The model is ``tests/fixtures/agent_model`` (its README says how it was built): a Qwen2
folder of hidden size 64 standing in for a pretrained instruct model, warm-started to
call synthetic tools none of the tasks use (``--warm-start tools``). No machine here can
download a pretrained model, and the warm start is far longer than a test, so the folder
is committed. Before training it calls tools it was warm-started on, and no task
succeeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import agent_clis

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "agent_model"
#: training sessions (and reports) per round
SESSIONS = 24


@dataclass(frozen=True)
class Case:
    cli: str
    binary: Callable[[], Path]
    #: training rounds
    rounds: int
    #: held-out sessions per measurement
    measured: int
    #: held-out successes after training that the test asks for (of ``measured``)
    threshold: int


CASES = [
    Case("claude", agent_clis.claude_binary, rounds=1, measured=48, threshold=3),
    # after two rounds Codex succeeds about half as often as Claude Code after one:
    # twice the sessions measure it as finely
    Case("codex", agent_clis.codex_binary, rounds=2, measured=96, threshold=4),
]


@pytest.mark.parametrize("case", CASES, ids=[c.cli for c in CASES])
def test_cli_learns_its_tasks_from_its_own_sessions(case: Case, tmp_path: Path) -> None:
    assert case.binary()  # installed by scripts/bootstrap
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "bench.agents", "--cli", case.cli, "--folder", str(FOLDER)]
    command += ["--measure", str(case.measured), "--held-out", str(case.measured + 4)]
    command += ["--sessions", str(SESSIONS), "--rounds", str(case.rounds)]
    command += ["--gate-tasks", "4", "--steps", "100", "--lr", "1e-3", "--target", "1.1"]
    command += ["--budget-s", "3600", "--work", str(tmp_path / "work"), "--results", str(results)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    ((name, measured),) = [(r["cli"], r["rounds"]) for r in json.loads(results.read_text())]
    before, after = measured[0], measured[-1]
    assert name == case.cli
    assert len(measured) == case.rounds + 1
    assert before["success"] <= 1 / case.measured, before
    assert after["success"] >= case.threshold / case.measured, measured
    assert after["release"] != before["release"]
    assert after["served_by"] == [after["release"]]  # every held-out receipt names it
    assert after["reports"] >= SESSIONS * case.rounds
