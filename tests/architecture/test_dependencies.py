"""pyproject.toml declares Reef's dependencies exactly as Reef imports them.

Every third-party module imported anywhere in reef/, streams/, recipes/ and trainers/
(at any depth: lazy imports inside functions count) belongs to a distribution declared
in ``[project] dependencies`` or in the ``engine`` / ``otel`` / ``contracts`` extra, and every
distribution declared there is imported somewhere. Distributions are matched to import
names through this environment's installed metadata. What a plain install (no extras)
can import is checked at run time by tests/e2e/test_wheel_install.py.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reef", "streams", "recipes", "trainers")
EXTRAS = ("engine", "otel", "contracts")
#: imported for type checkers only (``if TYPE_CHECKING:``): their stubs, no distribution
TYPING_ONLY = frozenset({"_typeshed"})


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"]]
    for extra in EXTRAS:
        lines += project["optional-dependencies"][extra]
    return {canonicalize_name(Requirement(line).name) for line in lines}


@cache
def owners() -> dict[str, set[str]]:
    """Top-level import name → the installed distributions that provide it."""
    return {
        top: {canonicalize_name(d) for d in dists}
        for top, dists in metadata.packages_distributions().items()
    }


def imports() -> Iterator[tuple[str, str]]:
    """(top-level module, ``file:line``) of every absolute import in Reef's packages."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    yield name.partition(".")[0], f"{path.relative_to(ROOT)}:{node.lineno}"


def third_party(top: str) -> bool:
    own = {*PACKAGES, "__future__"}
    return top not in sys.stdlib_module_names and top not in own and top not in TYPING_ONLY


def test_every_third_party_import_is_declared() -> None:
    wanted = declared()
    undeclared = sorted(
        f"{where}: import {top} (installed by {sorted(owners().get(top, set())) or 'nothing'})"
        for top, where in imports()
        if third_party(top) and not owners().get(top, set()) & wanted
    )
    assert not undeclared, (
        "imports of distributions pyproject.toml declares neither in dependencies nor in "
        f"the {'/'.join(EXTRAS)} extras (declare them there):\n" + "\n".join(undeclared)
    )


def test_every_declared_dependency_is_imported() -> None:
    imported = {top for top, _ in imports()}
    unused = sorted(
        name
        for name in declared()
        if not {top for top, dists in owners().items() if name in dists} & imported
    )
    assert not unused, f"declared in pyproject.toml but imported nowhere in Reef: {unused}"
