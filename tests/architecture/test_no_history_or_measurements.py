"""Docstrings and comments keep invariants and constraints, not development history or the
results of a run: what came before, scores per run, timings, machine load. A figure worth
keeping for users belongs in docs/benchmarks/ or docs/performance.md; a number the code
sets (a timeout, a protocol limit) stays. Bench programs may print measurements: only
their docstrings and comments are read here, as everywhere else."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.support.source_tree import REPO, ROOTS

#: a story of what was before (“before that”, “which Reef used before”, “as of commit …”)
HISTORY = (
    r"\b[Bb]efore that,|\bBefore that\b|\bused before\b|\bthe code before\b"
    r"|\bas of commit\b|\bthe same in (two|three|both|all|every) runs\b|\bin (two|three) runs\b"
)
#: a result of a run: machine load, “Measured (2 cores): …”, CPU or wall time per request,
#: speed-ups, profiler shares, score trajectories, durations a run took
MEASUREMENT = (
    r"\bload (average )?~?\d|\bshared cores\b|\(\d+ (shared )?cores[,)]|\bMeasured\b"
    r"|\bmeasured( \(| there\b| before\b| at this\b)|\d ?(ms|µs|us|s) of (CPU|wall)"
    r"|\d(\.\d+)? ?x (faster|slower)\b|\btimes (faster|slower)\b|\bprofiled with\b"
    r"|\d%( of)? (the|its) (serving|process)|\d\.\d+ ?(->|→) ?\d\.\d+|\btook ~?\d"
    r"|\bloaded by a test suite\b"
)
FORBIDDEN = re.compile(f"{HISTORY}|{MEASUREMENT}")
_STATEMENT_START = frozenset(
    {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
)


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every comment and docstring line of a Python source: a string
    that is a statement of its own counts, an f-string or an argument does not."""
    previous = tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
        elif _is_docstring(token, previous):
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type


def _is_docstring(token: tokenize.TokenInfo, previous: int) -> bool:
    """A plain string that is a statement of its own (not an f-string, not bytes)."""
    plain = not token.string.lstrip("rRuU").startswith(("f", "F", "b", "B"))
    return token.type == tokenize.STRING and previous in _STATEMENT_START and plain


def offending(source: str) -> list[tuple[int, str]]:
    return [(number, line.strip()) for number, line in prose(source) if FORBIDDEN.search(line)]


def test_docstrings_and_comments_carry_no_history_or_measurements() -> None:
    this = Path(__file__).resolve()
    sources = [
        path
        for root in ROOTS
        for path in (REPO / root).rglob("*.py")
        if "__pycache__" not in path.parts and path.resolve() != this
    ]
    assert len(sources) > 300
    texts = {path: path.read_text(errors="replace") for path in sources}
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line}"
        for path, text in texts.items()
        if FORBIDDEN.search(text)  # only a file with a match anywhere is tokenized
        for number, line in offending(text)
    ]
    assert not hits, (
        "state the invariant or constraint; figures go to docs/benchmarks/:\n" + "\n".join(hits)
    )


def test_the_patterns_catch_history_and_measurements_in_prose_only() -> None:
    source = '''"""A module. Measured (2 cores): 0.096 -> 0.306."""

# measured 3.2 ms of CPU at load 7
TIMEOUT_S = 30.0  # the broker's session timeout: a constant, not a result
LINE = f"load average {TIMEOUT_S} at 2.5x faster"  # a program may print figures


def f() -> None:
    """Reads each key once (the httpx client, which Reef used before, took longer)."""
    print("0.1 -> 0.2")
'''
    assert [number for number, _ in offending(source)] == [1, 3, 9]
    assert not offending('"""A timeout of 30 s; retried after 50 ms, doubling to 1 s."""\n')
