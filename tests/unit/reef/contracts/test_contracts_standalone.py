"""The contract suites Reef ships (reef.contracts) run in a project that is not Reef's.

An adapter's author has none of Reef's test configuration: no conftest, no stack plugin,
pytest-asyncio in its default strict mode, no registered markers. A throwaway project in
a temporary folder subclasses the log and state suites over adapters of its own (the
embedded log, a dict state) and runs pytest on itself in a fresh process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from reef.contracts.log import LogContract

ROOT = Path(__file__).resolve().parents[4]

ADAPTER_TESTS = '''
from pathlib import Path

import pytest_asyncio

from reef.contracts.log import LogContract
from reef.log.embedded import EmbeddedLog


class TestMyLog(LogContract):
    @pytest_asyncio.fixture
    async def log(self, tmp_path: Path):
        log = EmbeddedLog(tmp_path / "log.sqlite3", partitions=self.PARTITIONS)
        await log.start()
        try:
            yield log
        finally:
            await log.close()
'''


def test_the_log_suite_runs_in_an_adapter_authors_project(tmp_path: Path) -> None:
    project = tmp_path / "my-adapter"
    project.mkdir()
    (project / "test_my_log.py").write_text(ADAPTER_TESTS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", "--rootdir", str(project), str(project)],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary
    passed = int(summary.split(" passed")[0].split()[-1])
    suite = [name for name in dir(LogContract) if name.startswith("test_")]
    assert passed == len(suite), summary  # every test of the suite ran, none was skipped
