"""reef.harness is pure: its modules import only the standard library, the core's error
tree and each other, and a fresh interpreter importing it loads no third-party module
(the layer rules of tests/architecture/test_layers.py, applied to this package)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[4] / "reef" / "harness"
FIRST_PARTY_ALLOWED = ("reef.harness", "reef.core.errors")


def test_the_harness_package_imports_only_stdlib_and_itself() -> None:
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                stdlib = name.partition(".")[0] in sys.stdlib_module_names
                if not stdlib and not name.startswith(FIRST_PARTY_ALLOWED):
                    found.append(f"{path.name}: {name}")
    assert not found


def test_importing_it_loads_no_third_party_module() -> None:
    probe = (
        "import sys; before = set(sys.modules); import reef.harness; "
        "new = {m.partition('.')[0] for m in set(sys.modules) - before}; "
        "new -= sys.stdlib_module_names | {'reef'}; "
        "print(sorted(n for n in new if not n.startswith('_')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
