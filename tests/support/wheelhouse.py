"""Reef's wheel and an offline wheelhouse of its runtime dependencies, for install tests.

:func:`build_wheel` builds Reef's wheel from the working tree with the test
environment's build backend (no download). :func:`wheelhouse` repacks, as wheels, the
distributions the test environment has installed that a set of requirements needs (the
closure of their ``Requires-Dist``, markers evaluated for this interpreter, extras
only where a requirement names them): each installed distribution's files, as its
``RECORD`` lists them, under the tag its ``WHEEL`` file kept. So ``pip install
--no-index --find-links`` into a fresh environment is offline and quick, and holds
only what the requirements declare: a runtime import that Reef does not declare finds
nothing there.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
#: what an installer adds to a .dist-info folder: not part of the wheel
INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json"})


def build_wheel(out_dir: Path) -> Path:
    """Reef's wheel, built from the working tree (``pip wheel``, no isolation, offline)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "--wheel-dir", str(out_dir), str(ROOT)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = out_dir.glob("reef-*.whl")
    return wheel


def requirements_of(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` (every one, extras' too; markers decide later)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    lines = [line.partition(":")[2].strip() for line in text.splitlines()]
    keys = [line.partition(":")[0] for line in text.splitlines()]
    return [Requirement(v) for k, v in zip(keys, lines, strict=True) if k == "Requires-Dist"]


def _wanted(requirement: Requirement, extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))


def closure(requirements: Iterable[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need, transitively (each once); a
    requirement nothing installed satisfies raises LookupError naming it."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, frozenset[str]()) for r in requirements]
    while todo:
        requirement, extras = todo.pop()
        if not _wanted(requirement, extras):
            continue
        key = canonicalize_name(requirement.name)
        if (key, frozenset(requirement.extras)) in seen:
            continue
        seen.add((key, frozenset(requirement.extras)))
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError as exc:
            raise LookupError(f"{requirement} is not installed here") from exc
        if not requirement.specifier.contains(dist.version, prereleases=True):
            raise LookupError(f"{requirement}: installed {dist.version}")
        found[key] = dist
        todo += [(Requirement(r), frozenset(requirement.extras)) for r in dist.requires or []]
    return list(found.values())


def repack(dist: metadata.Distribution, out_dir: Path) -> Path:
    """``dist`` as the wheel it was installed from (files outside site-packages, such as
    console scripts, are left out: the installer writes them from entry_points.txt)."""
    info = Path(str(dist._path))  # type: ignore[attr-defined]  # its .dist-info folder
    site = info.parent
    tag = next(
        line.partition(":")[2].strip()
        for line in (info / "WHEEL").read_text().splitlines()
        if line.startswith("Tag:")
    )
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    wheel = out_dir / f"{name}-{dist.version}-{tag}.whl"
    with (info / "RECORD").open(newline="") as listed, zipfile.ZipFile(wheel, "w") as archive:
        for row in csv.reader(listed):
            path = row[0]
            source = site / path
            if path.startswith("..") or "__pycache__" in path or not source.is_file():
                continue
            if Path(path).name in INSTALLER_FILES and path.startswith(info.name):
                continue
            archive.write(source, path)
    return wheel


def wheelhouse(requirements: Iterable[Requirement], out_dir: Path) -> list[Path]:
    """Wheels, in ``out_dir``, of everything ``requirements`` need."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [repack(dist, out_dir) for dist in closure(requirements)]
