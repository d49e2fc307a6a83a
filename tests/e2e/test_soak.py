"""bench/soak.py keeps working: a 20-second soak on the embedded log writes its CSV, its
plot and its summary, with every scheduled request accounted for and answered."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from reef.testing.servers import REPO_ROOT, clean_env

pytestmark = pytest.mark.slow

RATE = 4.0
DURATION = 20.0


def test_a_short_soak_on_the_embedded_log_writes_csv_plot_and_summary(tmp_path: Path) -> None:
    argv = [sys.executable, str(REPO_ROOT / "bench" / "soak.py"), "--log", "embedded"]
    argv += ["--duration", str(DURATION), "--rate", str(RATE), "--batch", "32"]
    argv += ["--sample-every", "5", "--out", str(tmp_path)]
    done = subprocess.run(
        argv, env=clean_env(), capture_output=True, text=True, timeout=480, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "memory PLATEAUS" in done.stdout or "memory DOES NOT PLATEAU" in done.stdout

    with (tmp_path / "soak-embedded.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 3, rows
    # open loop: every due request was sent and answered (none shed, none failed)
    assert sum(int(r["requests"]) for r in rows) == int(RATE * DURATION)
    assert sum(int(r["errors"]) for r in rows) == 0, rows
    assert sum(int(r["report_errors"]) for r in rows) == 0, rows
    assert sum(int(r["reports"]) for r in rows) == int(RATE * DURATION)
    for row in rows:
        assert float(row["p99_ms"]) >= float(row["p50_ms"]) > 0, row
        for role in ("serve", "processors", "engine"):
            assert float(row[f"rss_{role}_mb"]) > 10, row
    # the reports joined into samples: pending, or already trained into a release
    assert any(
        int(r["samples_pending"] or 0) + int(r["releases_committed"] or 0) > 0 for r in rows
    ), rows

    png = (tmp_path / "soak-embedded.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
