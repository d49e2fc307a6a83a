"""The bench programs still import: every name a ``bench/`` script takes from Reef's own
packages (``reef``, ``streams``, ``recipes``, ``trainers``, ``bench``) exists there.

The bench programs run outside pytest (most start a whole deployment), so a refactor that
moves a function can break one silently until a slow end-to-end test runs it (it did:
``bench/soak.py`` kept importing the demo's grader after it moved). This check resolves
each such import in a second, without running any program.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("reef", "streams", "recipes", "trainers", "reef_dev", "bench")
SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


def project_imports(script: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every ``from <project module> import ...`` in the script, at any
    depth (imports inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(script.read_text(), filename=str(script))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] in PROJECT:
                found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend(
                (alias.name, []) for alias in node.names if alias.name.split(".")[0] in PROJECT
            )
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_project_name_a_bench_program_imports_exists(script: Path) -> None:
    missing = []
    for module_name, names in project_imports(script):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing.append(f"{module_name}: {exc}")
            continue
        for name in names:
            if name == "*" or hasattr(module, name):
                continue
            try:  # a submodule: ``from reef.log import kafka``
                importlib.import_module(f"{module_name}.{name}")
            except ImportError:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"{script.name} imports names that do not exist: {missing}"


def test_the_check_sees_a_moved_name(tmp_path: Path) -> None:
    """The check is not vacuous: the import that broke ``bench/soak.py`` is reported."""
    script = tmp_path / "moved.py"
    script.write_text("def main() -> None:\n    from reef.cli.demo import grade\n")
    ((module, names),) = project_imports(script)
    assert (module, names) == ("reef.cli.demo", ["grade"])
    assert not hasattr(importlib.import_module(module), "grade")
