"""The closed loop with a real CLI, shortened: Claude Code, served by Reef's engine on the
embedded log, succeeds on held-out tasks after one round of training on its own
sessions.

This is ``bench/agents.py`` itself, run with one round and its results written as JSON:
the pinned CLI works on "create a file NAME containing WORD" tasks in
its working directory; success is checked on disk; a checker reports each training
session's outcome with ``reef_client``, quoting its receipts, with the call that would
have succeeded as the correction; the ``sft`` trainer trains a candidate, the gate
decides, the sidecar hot-loads the release, and held-out sessions (tasks whose words no
training task has) run again.

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
from pathlib import Path

from reef_dev import agent_clis

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "agent_model"
#: held-out sessions per measurement
MEASURED = 48
#: held-out successes after training that the test asks for (of MEASURED)
THRESHOLD = 3


def test_claude_code_learns_its_tasks_from_its_own_sessions(tmp_path: Path) -> None:
    assert agent_clis.claude_binary()  # installed by scripts/bootstrap
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "bench.agents", "--cli", "claude", "--folder", str(FOLDER)]
    command += ["--measure", str(MEASURED), "--held-out", str(MEASURED + 4)]
    command += ["--sessions", "24", "--rounds", "1"]
    command += ["--gate-tasks", "4", "--steps", "100", "--lr", "1e-3", "--target", "1.1"]
    command += ["--budget-s", "3600", "--work", str(tmp_path / "work"), "--results", str(results)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    ((cli, rounds),) = [(r["cli"], r["rounds"]) for r in json.loads(results.read_text())]
    before, after = rounds
    assert cli == "claude"
    assert before["success"] <= 1 / MEASURED, before
    assert after["success"] >= THRESHOLD / MEASURED, rounds
    assert after["release"] != before["release"]
    assert after["served_by"] == [after["release"]]  # every held-out receipt names it
    assert after["reports"] >= 24
