"""The repository's own source folders, as the architecture tests that read them see it."""

from __future__ import annotations

from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
#: the folders whose files are the project's own code, tests, benchmarks and scripts
ROOTS: Final = ("reef", "streams", "recipes", "trainers", "tests", "bench", "scripts", "tutorials")
