"""``reef demo``: a shortened run completes; the committed full run's plot and table hold up."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from reef.testing.servers import clean_env

DOCS = Path(__file__).resolve().parents[2] / "docs"


def scores(path: Path) -> list[float]:
    with path.open() as handle:
        return [float(row["score"]) for row in csv.DictReader(handle)]


@pytest.mark.slow
def test_a_shortened_demo_completes_with_a_table_and_a_plot(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "reef.cli", "demo", "--releases", "1", "--minutes", "5",
         "--batch", "64", "--out", str(out)],
        env=clean_env(), capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "mean held-out score" in done.stdout
    png = (out / "scores.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    measured = scores(out / "scores.csv")
    assert len(measured) >= 2, measured  # the creation release and at least one trained one
    assert all(0.0 <= s <= 1.0 for s in measured)


def test_the_full_run_in_the_readme_improved_release_by_release() -> None:
    png = (DOCS / "demo-scores.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    measured = scores(DOCS / "demo-scores.csv")
    assert len(measured) >= 4, "the creation release and at least 3 trained releases"
    assert measured[0] < 0.2 and measured[-1] > 0.5, measured
    assert measured == sorted(measured), "each committed release scored at least its parent"
