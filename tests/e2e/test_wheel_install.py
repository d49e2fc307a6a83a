"""Reef installed like a package: its wheel, in a fresh virtualenv, with no extras.

The wheel is built from the working tree; its dependencies come from a wheelhouse
repacked from this test environment (tests/support/wheelhouse.py: offline, and holding
only what the wheel's ``Requires-Dist`` asks for, plus ``openai`` for the README's
agent). In that environment, never the checkout: ``reef --help``; every module imports
unless it needs an extra (``engine``, ``otel``) that was not installed; and the walk of
docs/tutorials/first-walk.md runs as written (``reef serve``, record-only, in front of
the scripted provider: an exchange through the OpenAI SDK, its receipt read back, a
report with curl, its fate, the release chain), then the README's quickstart against
the same server. A runtime import the wheel does
not declare, or a package data file it leaves out (``schemas/*.avsc`` above all: no
event can be written without them), fails here.

Not covered: the ``engine`` extra (PyTorch is about 2 GB; its code is exercised from the
test environment by tests/engine and the learning tests).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from reef.testing.servers import free_port
from tests.support.wheelhouse import ROOT, build_wheel, requirements_of, wheelhouse

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
WALK = ROOT / "docs" / "tutorials" / "first-walk.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.DOTALL | re.MULTILINE)
README_ADDRESS = "http://127.0.0.1:8900"
#: what the user adds beside Reef to run the README's agent
USER_EXTRAS = ("openai",)
#: extras a plain install leaves out: modules needing them may fail to import
OPTIONAL_EXTRAS = ("engine", "otel", "contracts")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path
    work: Path

    def env(self) -> dict[str, str]:
        """A user's shell with the environment's bin first and no Reef settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REEF_")}
        for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            env.pop(name, None)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def tool(self, name: str) -> str:
        """``python``, ``reef``, ...: the environment's own, by absolute path."""
        return str(self.bin / name)

    def run(self, *argv: str, timeout: float = 60, **kwargs: str) -> str:
        """``argv`` (its first item one of the environment's tools) run in ``work``."""
        done = subprocess.run(
            [self.tool(argv[0]), *argv[1:]],
            cwd=self.work,
            env={**self.env(), **kwargs},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel-install")
    wheel = build_wheel(root / "dist")
    needed = [r for r in requirements_of(wheel) if r.marker is None or r.marker.evaluate()]
    wheelhouse([*needed, *(Requirement(n) for n in USER_EXTRAS)], root / "wheelhouse")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-index", "--find-links", str(root / "wheelhouse"), "--no-cache-dir",
         "--no-compile", "--disable-pip-version-check", "--quiet", str(wheel), *USER_EXTRAS],
        check=True,
        capture_output=True,
    )  # fmt: skip
    work = root / "work"
    work.mkdir()
    found = Installed(wheel, venv / "bin", work)
    where = found.run("python", "-c", "import reef; print(reef.__file__)").strip()
    assert Path(where).is_relative_to(venv), f"reef imported from {where}, not the install"
    return found


def test_the_wheel_carries_every_schema_and_data_file(installed: Installed) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "schemas", "reef", "streams", "recipes", "trainers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    wanted = {
        "reef/_schemas/" + path.removeprefix("schemas/") if path.startswith("schemas/") else path
        for path in tracked
        if (ROOT / path).is_file()
    }
    assert any(name.endswith(".avsc") for name in wanted)
    with zipfile.ZipFile(installed.wheel) as archive:
        shipped = set(archive.namelist())
    missing = sorted(wanted - shipped)
    assert not missing, f"the wheel leaves out {missing}"
    # the development stack (its builders, the collector's Go sources), the load tools and
    # the synthetic event builders stay in the repository
    development = sorted(name for name in shipped if name.startswith(("reef_dev/", "tests/")))
    assert not development, f"the wheel ships development tools: {development[:5]}"


@functools.cache
def _provider_of(module: str) -> str | None:
    """The distribution that provides ``module`` in this test environment."""
    providers = metadata.packages_distributions().get(module.partition(".")[0], [])
    if len(providers) <= 1:  # one distribution owns the top-level package
        return providers[0] if providers else None
    spec = importlib.util.find_spec(module)  # a namespace package: whose file is it
    origin = None if spec is None or spec.origin is None else Path(spec.origin).resolve()
    for name in providers:
        dist = metadata.distribution(name)
        if any(Path(str(dist.locate_file(f))).resolve() == origin for f in dist.files or []):
            return name
    return None


def test_every_module_imports_with_the_declared_dependencies(installed: Installed) -> None:
    # copied out: run from tests/support, its streams.py would shadow the streams package
    script = installed.work / "import_everything.py"
    script.write_text((ROOT / "tests" / "support" / "import_everything.py").read_text())
    result = json.loads(installed.run("python", str(script)))
    assert result["imported"] > 100
    optional = {
        r.name.lower()
        for r in requirements_of(installed.wheel)
        if r.marker is not None
        and any(r.marker.evaluate({"extra": extra}) for extra in OPTIONAL_EXTRAS)
    }
    undeclared = {
        module: (missing, provider)
        for module, missing in result["missing"].items()
        if (provider := _provider_of(missing)) is None or provider.lower() not in optional
    }
    assert not undeclared, (
        "modules that need a distribution the wheel declares in no optional extra "
        f"(module: (missing import, distribution here)): {undeclared}"
    )


def test_reef_help_runs(installed: Installed) -> None:
    out = installed.run("reef", "--help")
    assert "serve" in out and "Usage: reef" in out
    assert " stack " not in out  # the development stack is scripts/stack, not a command


def test_the_first_walk_and_the_readme_quickstart_run_as_written(installed: Installed) -> None:
    """The walk's script as the docs give it, then (while its ``reef serve`` still runs,
    record-only in front of the scripted provider) the README's quickstart."""
    (walk,) = [b for b in BASH_BLOCK.findall(WALK.read_text()) if "set -euo pipefail" in b]
    blocks = PYTHON_BLOCK.findall(README.read_text())
    assert blocks and all(README_ADDRESS in b for b in blocks)
    assert f"--port {README_ADDRESS.rpartition(':')[2]}" in walk  # the README's address
    folder = installed.work / "walk"
    folder.mkdir()
    (folder / "quickstart.py").write_text("\n".join([*blocks, QUICKSTART_OUTCOME]))
    script = walk + "REEF_TOKEN=reef-local python quickstart.py > quickstart.out\n"
    for default in ("8900", "8901"):  # the reader's ports may be taken here
        chosen = str(free_port())
        script = script.replace(default, chosen)
        (folder / "quickstart.py").write_text(
            (folder / "quickstart.py").read_text().replace(default, chosen)
        )
    (folder / "walk.sh").write_text(script)
    out = _run_walk(installed, folder)
    lines = out.splitlines()
    assert lines[0].startswith("receipt: ") and re.fullmatch(r"report \S+: accepted", lines[1])
    assert lines[-1] == "['creation']"
    record = json.loads((folder / "record.json").read_text())
    assert lines[0].removeprefix("receipt: ") in json.dumps(record)
    outcome = json.loads((folder / "quickstart.out").read_text().splitlines()[-1])
    assert outcome["fate"]["status"] == "accepted", outcome
    assert [r["operation"] for r in outcome["chain"]] == ["creation"]


#: appended to the README's blocks: what they ended with, as one JSON line
QUICKSTART_OUTCOME = (
    "import json\nprint(json.dumps({'receipt': receipt, 'fate': fate, 'chain': chain}))\n"
)


def _run_walk(installed: Installed, folder: Path) -> str:
    process = subprocess.Popen(
        ["bash", "walk.sh"],
        cwd=folder,
        env=installed.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail(f"the walk did not finish\n{out}\n{_logs(folder)}")
    assert process.returncode == 0, f"{out}\n{_logs(folder)}"
    return out


def _logs(folder: Path) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in folder.glob("*.log")
    )
