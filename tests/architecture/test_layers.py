"""The layer rules, checked over every import of every source module.

An AST walk over reef/, streams/, recipes/, trainers/, reef_dev/, tests/ and bench/ sees every
import: at module level, inside functions and under ``if TYPE_CHECKING:`` alike.
Relative imports are resolved, and a name imported from a first-party *package* is
followed to the module that defines it, so ``from reef.artifacts import
LocalArtifactStore`` counts as an import of ``reef.artifacts.local``.

- R1 core purity: a module of the pure core (:data:`CORE_MODULES`) imports only the
  standard library and the core; a fresh interpreter importing the core loads no
  third-party module beyond :data:`ALLOWED_CORE_THIRD_PARTY`.
- R2 adapters: services, api, engine and sidecar never import an adapter module.
- R3 wiring: inside reef/, only the wiring module and CLI modules import ``trainers``,
  ``recipes.registry`` or ``streams``.
- R4 no import cycle between first-party modules, function-level imports included
  (each strongly connected component is reported once, as its sorted modules).
- R5 no ``isinstance(x, C)`` with ``C`` an adapter class outside the adapter's package.
- R6 every exception class of the product is named in the tree drawn in the docstring
  of reef/core/errors.py.
- R7 tests import product code, the development tools (reef_dev), tests.support and
  tests.contract* only (never a ``test_*`` or ``conftest`` module); bench/ never imports
  ``tests``.
- R8 the product (what the wheel ships) never imports the development tools
  (``reef_dev``: the local stack, load tools, synthetic events), nor does reef_dev import
  ``tests`` or ``bench``.

Today's violations are allow-listed, one ``ALLOWED_R*`` constant per rule, keyed
without line numbers so unrelated edits do not disturb them. A new violation fails its
rule as ``file:line: <import> — <rule>``; an allow-listed violation that is gone fails
too, until its entry is deleted. The layering is done when every ``ALLOWED_R*`` is
empty.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

REPO: Final = Path(__file__).resolve().parents[2]
ROOTS: Final = ("reef", "streams", "recipes", "trainers", "reef_dev", "tests", "bench")
PRODUCT: Final = ("reef", "streams", "recipes", "trainers")
FIRST_PARTY: Final = frozenset(ROOTS)

#: the pure core: every module of the reef.core package and its subpackages
CORE_MODULES: Final = frozenset(
    ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
    for path in (REPO / "reef" / "core").rglob("*.py")
) | {"reef.core"}
#: services, api, engine and sidecar: exact names, or prefixes ending in "."
SERVICE_MODULES: Final = (
    "reef.api.",
    "reef.engine.",
    "reef.sidecar.",
    "reef.services.",
)
ADAPTER_MODULES: Final = frozenset(
    {
        "reef.log.embedded",
        "reef.log.kafka",
        "reef.artifacts.local",
        "reef.artifacts.s3",
        "reef.crypto.rings",  # TableKeyRing, FollowingKeyRing
    }
)
WIRING_MODULES: Final = frozenset({"reef.wiring"})
#: the command modules: the reef.cli package
CLI_PACKAGE: Final = "reef.cli"
#: what only wiring and CLI modules of reef/ may import: exact names, or prefixes + "."
WIRED_ONLY: Final = ("trainers", "recipes.registry", "streams")
#: the docstrings in which every exception class of the product must be named
ERROR_TREES: Final = (
    "reef/core/errors.py",
    "reef/engine/errors.py",
    "reef/artifacts/errors.py",
    "recipes/errors.py",
)
#: R5 and R6 are about the product (a test may assert which adapter a factory chose)
ISINSTANCE_SCOPE: Final = PRODUCT
EXCEPTION_SCOPE: Final = PRODUCT
#: tests that ship with the product (run by adapters' authors): tests for R5 and R6
CONTRACT_SUITES: Final = ("reef.contracts",)

# ---------------------------------------------------------------- today's allow-lists
# Delete an entry when its seam is fixed; the test says which ones are stale.

#: third-party top-level modules loaded by importing the core in a fresh interpreter
ALLOWED_CORE_THIRD_PARTY: Final[frozenset[str]] = frozenset()
ALLOWED_R1: Final[tuple[tuple[str, str], ...]] = ()
#: (file, imported adapter module)
ALLOWED_R2: Final[tuple[tuple[str, str], ...]] = ()
#: (file, imported module)
ALLOWED_R3: Final[tuple[tuple[str, str], ...]] = ()
#: the sorted modules of each import cycle (strongly connected component)
ALLOWED_R4: Final[tuple[tuple[str, ...], ...]] = ()
#: (file, adapter class), once per isinstance call
ALLOWED_R5: Final[tuple[tuple[str, str], ...]] = ()
#: (file, exception class): empty, every exception class is drawn
ALLOWED_R6: Final[tuple[tuple[str, str], ...]] = ()
#: (file, imported module)
ALLOWED_R7: Final[tuple[tuple[str, str], ...]] = ()
#: (file, imported module)
ALLOWED_R8: Final[tuple[tuple[str, str], ...]] = ()


# ---------------------------------------------------------------- the source tree


@dataclass(frozen=True, eq=False)
class Module:
    name: str
    path: str
    source: str
    tree: ast.Module
    is_package: bool


@dataclass(frozen=True)
class Import:
    module: Module
    line: int
    target: str  #: the module imported (a name is followed to its defining module)
    text: str  #: as written, relative dots resolved


@dataclass(frozen=True)
class Finding:
    key: tuple[str, ...]
    path: str
    line: int
    what: str


@functools.cache
def modules() -> dict[str, Module]:
    """Every first-party source module by dotted name."""
    found: dict[str, Module] = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            parts = rel.with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source, str(path))
            found[name] = Module(name, rel.as_posix(), source, tree, is_package)
    return found


_BLOCKS: Final = ("body", "orelse", "finalbody", "handlers", "cases")
_DEFINITIONS: Final = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _statements(nodes: Iterable[ast.AST], *, into_definitions: bool) -> Iterator[ast.stmt]:
    """Statements at any depth, in source order, without walking expressions (fast)."""
    for node in nodes:
        if isinstance(node, ast.stmt):
            yield node
            if not into_definitions and isinstance(node, _DEFINITIONS):
                continue
        for block in _BLOCKS:
            yield from _statements(getattr(node, block, ()), into_definitions=into_definitions)


@functools.cache
def statements(module: Module) -> tuple[ast.stmt, ...]:
    """Every statement of ``module``: module level, in functions and classes."""
    return tuple(_statements(module.tree.body, into_definitions=True))


def _top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports executed when the module runs (not those inside functions or classes)."""
    for node in _statements(tree.body, into_definitions=False):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


#: a binding: (module, attribute); attribute None means the module itself
Binding = tuple[str, str | None]


@functools.cache
def _package_exports(package: str) -> dict[str, Binding]:
    """Names a package's ``__init__`` imports, so importers can be followed through it."""
    exports: dict[str, Binding] = {}
    for node in _top_level_imports(modules()[package].tree):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(modules()[package], node)
            for alias in node.names:
                exports[alias.asname or alias.name] = (base, alias.name)
        else:
            for alias in node.names:
                if alias.asname:
                    exports[alias.asname] = (alias.name, None)
    return exports


def locate(base: str, name: str) -> Binding:
    """Where ``from base import name`` really comes from."""
    seen: set[Binding] = set()
    while (base, name) not in seen:
        seen.add((base, name))
        known = modules().get(base)
        if known is not None and known.is_package and name in _package_exports(base):
            origin, attribute = _package_exports(base)[name]
            if attribute is None:
                return origin, None
            base, name = origin, attribute
        elif f"{base}.{name}" in modules():
            return f"{base}.{name}", None
        else:
            return base, name
    return base, name


def imports_of(module: Module) -> Iterator[Import]:
    for node in statements(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, node.lineno, alias.name, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                target = base if alias.name == "*" else locate(base, alias.name)[0]
                yield Import(module, node.lineno, target, f"from {base} import {alias.name}")


@functools.cache
def all_imports() -> tuple[Import, ...]:
    return tuple(i for m in modules().values() for i in imports_of(m))


def _test_code(name: str, scope: tuple[str, ...]) -> bool:
    """``name`` is outside ``scope`` or one of the contract suites (tests, shipped)."""
    return not _matches(name, scope) or _matches(name, CONTRACT_SUITES)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """``name`` is one of ``patterns`` or inside a package among them ("a." is a prefix)."""
    return any(
        name.startswith(p) if p.endswith(".") else name == p or name.startswith(f"{p}.")
        for p in patterns
    )


def _is_stdlib(name: str) -> bool:
    return name.partition(".")[0] in sys.stdlib_module_names


def _import_finding(imp: Import) -> Finding:
    what = imp.text if imp.text.endswith(imp.target) else f"{imp.text} (= {imp.target})"
    return Finding((imp.module.path, imp.target), imp.module.path, imp.line, what)


# ---------------------------------------------------------------- the rules


def r1_core_purity() -> Iterator[Finding]:
    for imp in all_imports():
        if imp.module.name in CORE_MODULES and not (
            _is_stdlib(imp.target) or imp.target in CORE_MODULES
        ):
            yield _import_finding(imp)


def r2_adapters() -> Iterator[Finding]:
    for imp in all_imports():
        if _matches(imp.module.name, SERVICE_MODULES) and imp.target in ADAPTER_MODULES:
            yield _import_finding(imp)


def _is_cli(name: str) -> bool:
    return name == CLI_PACKAGE or name.startswith(f"{CLI_PACKAGE}.")


def r3_wiring() -> Iterator[Finding]:
    for imp in all_imports():
        importer = imp.module.name
        if (
            _matches(importer, ("reef",))
            and importer not in WIRING_MODULES
            and not _is_cli(importer)
            and _matches(imp.target, WIRED_ONLY)
        ):
            yield _import_finding(imp)


def import_graph() -> dict[str, dict[str, Import]]:
    """First-party module → the modules it imports (the first import of each)."""
    graph: dict[str, dict[str, Import]] = {name: {} for name in modules()}
    for imp in all_imports():
        if imp.target in graph and imp.target != imp.module.name:
            graph[imp.module.name].setdefault(imp.target, imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        found.append(sorted(component))
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(sorted(graph[successor]))))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def _cycle_through(start: str, members: set[str], graph: dict[str, dict[str, Import]]) -> list[str]:
    """A shortest import path start → … → start inside one component."""
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor == start:
                    return [*paths[node], start]
                if successor in members and successor not in paths:
                    paths[successor] = [*paths[node], successor]
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


def r4_cycles() -> Iterator[Finding]:
    graph = import_graph()
    for component in strongly_connected(graph):
        cycle = _cycle_through(component[0], set(component), graph)
        first = graph[cycle[0]][cycle[1]]
        yield Finding(tuple(component), first.module.path, first.line, " → ".join(cycle))


@functools.cache
def _bindings(module: Module) -> dict[str, Binding]:
    """What each imported name means in ``module`` (imports anywhere in the file)."""
    bound: dict[str, Binding] = {}
    for node in statements(module):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                bound[alias.asname or alias.name] = locate(base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.partition(".")[0]
                    bound[top] = (top, None)
    return bound


def _classes(name: str) -> dict[str, ast.ClassDef]:
    known = modules().get(name)
    if known is None:
        return {}
    return {n.name: n for n in known.tree.body if isinstance(n, ast.ClassDef)}


def resolve(module: Module, expr: ast.expr) -> Binding | None:
    """The (module, name) an expression such as ``EmbeddedLog`` or ``log.KafkaLog`` names."""
    if isinstance(expr, ast.Name):
        if expr.id in _classes(module.name):
            return module.name, expr.id
        return _bindings(module).get(expr.id, ("builtins", expr.id))
    if isinstance(expr, ast.Attribute):
        owner = resolve(module, expr.value)
        if owner is None:
            return None
        if owner[1] is None:
            return locate(owner[0], expr.attr)
        return f"{owner[0]}.{owner[1]}", expr.attr
    return None


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base).endswith("Protocol") for base in node.bases)


def adapter_classes() -> dict[Binding, str]:
    """(adapter module, class) → the adapter's own package."""
    return {
        (name, cls): name.rpartition(".")[0]
        for name in sorted(ADAPTER_MODULES)
        for cls, node in _classes(name).items()
        if not _is_protocol(node)
    }


def _isinstance_calls(module: Module) -> Iterator[tuple[ast.Call, ast.expr]]:
    """(call, class) for each class an ``isinstance(x, C)`` or ``(C, D)`` tests."""
    for node in ast.walk(module.tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            kinds = node.args[1]
            for kind in kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]:
                yield node, kind


def r5_isinstance() -> Iterator[Finding]:
    adapters = adapter_classes()
    names = [str(cls) for _, cls in adapters]
    for module in modules().values():
        # a module names a class only where its source spells it (import or attribute)
        if _test_code(module.name, ISINSTANCE_SCOPE) or not any(
            n in module.source for n in names
        ):
            continue
        for call, kind in _isinstance_calls(module):
            named = resolve(module, kind)
            package = adapters.get(named) if named else None
            if named and package and not _matches(module.name, (package,)):
                key = (module.path, str(named[1]))
                yield Finding(key, module.path, call.lineno, ast.unparse(call))


def _external_exception(module_name: str, name: str) -> bool:
    """A base class outside first-party code: builtins and stdlib are checked for real."""
    if module_name == "builtins":
        value = getattr(builtins, name, None)
        return isinstance(value, type) and issubclass(value, BaseException)
    if _is_stdlib(module_name):
        try:
            value = getattr(importlib.import_module(module_name), name, None)
        except ImportError:
            return False
        return isinstance(value, type) and issubclass(value, BaseException)
    # third-party: judged by its name, so the test imports no third-party library
    return name.endswith(("Error", "Exception", "Exit", "Interrupt"))


def is_exception(module: Module, node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
    for base in node.bases:
        named = resolve(module, base)
        if named is None or named[1] is None:
            continue
        origin = modules().get(named[0])
        if origin is None:
            if _external_exception(named[0], named[1]):
                return True
            continue
        key = f"{named[0]}.{named[1]}"
        parent = _classes(named[0]).get(named[1])
        if parent is not None and key not in seen and is_exception(origin, parent, seen | {key}):
            return True
    return False


@functools.cache
def _drawn_names() -> frozenset[str]:
    words: set[str] = set()
    for path in ERROR_TREES:
        doc = ast.get_docstring(ast.parse((REPO / path).read_text(encoding="utf-8"))) or ""
        words.update(re.findall(r"\w+", doc))
    return frozenset(words)


def r6_error_tree() -> Iterator[Finding]:
    for module in modules().values():
        if _test_code(module.name, EXCEPTION_SCOPE):
            continue
        for node in statements(module):
            if (
                isinstance(node, ast.ClassDef)
                and is_exception(module, node)
                and node.name not in _drawn_names()
            ):
                key = (module.path, node.name)
                yield Finding(key, module.path, node.lineno, f"class {node.name}")


def _borrowed_test_code(target: str) -> bool:
    last = target.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def r7_tests() -> Iterator[Finding]:
    for imp in all_imports():
        importer, target = imp.module.name, imp.target
        if _matches(importer, ("tests",)) and _matches(target, tuple(FIRST_PARTY)):
            allowed = (
                _matches(target, PRODUCT)
                or _matches(target, ("reef_dev",))
                or _matches(target, ("tests.support",))
                or target.startswith("tests.contract")
            )
            if not allowed or _borrowed_test_code(target):
                yield _import_finding(imp)
        elif _matches(importer, ("bench",)) and _matches(target, ("tests",)):
            yield _import_finding(imp)


def r8_development_tools() -> Iterator[Finding]:
    for imp in all_imports():
        importer, target = imp.module.name, imp.target
        if (_matches(importer, PRODUCT) and _matches(target, ("reef_dev",))) or (
            _matches(importer, ("reef_dev",)) and _matches(target, ("tests", "bench"))
        ):
            yield _import_finding(imp)


# ---------------------------------------------------------------- the tests


@dataclass(frozen=True)
class Rule:
    name: str
    says: str
    findings: Callable[[], Iterator[Finding]]
    allowed: tuple[tuple[str, ...], ...]
    #: every occurrence counts (an allow-list entry per occurrence), not one per key
    counted: bool = False


RULES: Final = (
    Rule(
        "R1",
        "the pure core imports only the standard library and the core",
        r1_core_purity,
        ALLOWED_R1,
    ),
    Rule(
        "R2",
        "services, api, engine and sidecar never import an adapter module",
        r2_adapters,
        ALLOWED_R2,
    ),
    Rule(
        "R3",
        "inside reef/ only wiring and CLI modules import trainers, recipes.registry or streams",
        r3_wiring,
        ALLOWED_R3,
    ),
    Rule("R4", "no import cycle between modules", r4_cycles, ALLOWED_R4),
    Rule(
        "R5",
        "no isinstance on an adapter class outside its own package",
        r5_isinstance,
        ALLOWED_R5,
        counted=True,
    ),
    Rule(
        "R6",
        "every exception class is drawn in the tree in reef/core/errors.py's docstring",
        r6_error_tree,
        ALLOWED_R6,
    ),
    Rule(
        "R7",
        "tests import product code, tests.support and tests.contract* only "
        "(never a test_* or conftest module); bench/ never imports tests",
        r7_tests,
        ALLOWED_R7,
    ),
    Rule(
        "R8",
        "the product never imports reef_dev, and reef_dev never imports tests or bench",
        r8_development_tools,
        ALLOWED_R8,
    ),
)


def violations(rule: Rule) -> tuple[list[str], list[tuple[str, ...]]]:
    """(new violations as ``file:line: <import> — <rule>``, stale allow-list entries)."""
    findings = list(rule.findings())
    found = Counter(f.key for f in findings)
    if not rule.counted:
        found = Counter(set(found))
    allowed = Counter(rule.allowed)
    new_keys = found - allowed
    new = sorted({(f.path, f.line, f.what) for f in findings if f.key in new_keys})
    lines = [f"{path}:{line}: {what} — {rule.name} {rule.says}" for path, line, what in new]
    return lines, sorted((allowed - found).elements())


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_layer_rule(rule: Rule) -> None:
    new, stale = violations(rule)
    message = []
    if new:
        message.append(f"{len(new)} new violation(s) of {rule.name}:\n" + "\n".join(new))
    if stale:
        lines = "\n".join(f"    {entry!r}," for entry in stale)
        message.append(
            f"{len(stale)} stale entry(ies) in ALLOWED_{rule.name}: the violation is gone, "
            f"delete the line(s) from ALLOWED_{rule.name}:\n{lines}"
        )
    if message:
        pytest.fail("\n\n".join(message), pytrace=False)


_LOADED_BY_CORE = """
import importlib, sys
first_party, names = set(sys.argv[1].split(",")), sys.argv[2].split(",")
before = set(sys.modules)
for name in names:
    importlib.import_module(name)
top = {m.partition(".")[0] for m in set(sys.modules) - before}
# private top-level modules (_cffi_backend, _cython_3_3_1, _sysconfigdata_*) and
# cython_runtime are helpers of a listed package, named by version and platform
top = {t for t in top if not t.startswith("_") and t != "cython_runtime"}
print(",".join(sorted(top - sys.stdlib_module_names - first_party)))
"""


def test_core_loads_no_third_party_module() -> None:
    """R1 at run time: what a fresh interpreter loads to import the core."""
    result = subprocess.run(
        [sys.executable, "-c", _LOADED_BY_CORE, ",".join(ROOTS), ",".join(sorted(CORE_MODULES))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    loaded = frozenset(filter(None, result.stdout.strip().split(",")))
    new = sorted(loaded - ALLOWED_CORE_THIRD_PARTY)
    stale = sorted(ALLOWED_CORE_THIRD_PARTY - loaded)
    assert not new, f"R1: importing the core loads third-party module(s) {new}"
    assert not stale, (
        f"R1: importing the core no longer loads {stale}: "
        "the allow-list entry is stale, delete it from ALLOWED_CORE_THIRD_PARTY"
    )
