"""Code, tests, benchmarks and scripts keep invariants and constraints, not history: no
issue numbers and no references to files outside the repository (the project's own
docs/ are where the contract and its reasons live)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.source_tree import REPO, ROOTS

SUFFIXES = frozenset({".py", ".sh", ".toml", ".yaml", ".yml", ""})
#: an issue number, or a document that only exists outside this repository
FORBIDDEN = re.compile(
    r"\b[Ii]ssues? #?\d+|\bPROTOCOL\.md\b|\bDESIGN\.md\b|\bSTYLE\.md\b|\bseeds/(?:\d|README)"
    r"|\blearning-notes\b|\bbench-notes\b"
)


def _sources() -> list[Path]:
    return [
        path
        for root in ROOTS
        for path in (REPO / root).rglob("*")
        if path.is_file() and _is_source(path)
    ]


def _is_source(path: Path) -> bool:
    """Code and scripts (a file without a suffix counts in scripts/ only)."""
    if path.suffix not in SUFFIXES or "__pycache__" in path.parts:
        return False
    return bool(path.suffix) or path.parent.name == "scripts"


def test_no_issue_numbers_or_outside_documents_are_cited() -> None:
    sources = _sources()
    assert len(sources) > 300
    this = Path(__file__).resolve()
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sources
        if path.resolve() != this
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not hits, "cite the docs/ page instead:\n" + "\n".join(hits)
