"""The install script, run for real with ``sh`` in a temporary HOME, for every adapter:
first install, re-run, upgrade (stale file pruned), a tampered file, a corrupted script,
a pin to the older release, uninstall. Scripts are generated here (pure); the served
path is covered end to end by tests/e2e/test_harness_install.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from reef.harness import (
    RECORD_FILE,
    InstallRecord,
    UnsafeHarnessPathError,
    adapter,
    install_script,
    render_files,
)
from tests.support.harness_install import run_sh, tree_of

V1 = {
    "system_prompt.md": "You are v1.\n",
    "rules/quotes.md": "Say 'it''s' and \"so\"; $HOME stays `literal` \\n.",
    "skills/a.md": "# A\nDo a.\n",
    "skills/old.md": "# Old\nGone in v2.\n",
    "commands/go.md": "Go.\n",
}
V2 = {**{k: v for k, v in V1.items() if k != "skills/old.md"}, "skills/a.md": "# A\nDo a, v2.\n"}
R1, R2 = "1" * 32, "2" * 32


def script(files: dict[str, str], name: str, release: str) -> str:
    spec = adapter(name)
    return install_script(render_files(files, name), spec=spec, scenario="demo", release_id=release)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.mark.parametrize("name", ["claude", "codex", "generic"])
def test_install_rerun_upgrade_tamper_pin_uninstall(home: Path, name: str) -> None:
    dest = home / f".{name}"
    v1, v2 = script(V1, name, R1), script(V2, name, R2)

    first = run_sh(v1, dest, home)
    assert first.returncode == 0, first.stderr
    assert tree_of(dest) == render_files(V1, name)  # exact bytes, quotes and $ kept
    record = InstallRecord.parse((dest / RECORD_FILE).read_text())
    assert (record.release_id, record.adapter, record.scenario) == (R1, name, "demo")
    assert "installed release " + R1 in first.stdout

    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    again = run_sh(v1, dest, home)
    assert again.returncode == 0 and "already current" in again.stdout, again
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == before  # nothing written

    upgrade = run_sh(v2, dest, home)
    assert upgrade.returncode == 0, upgrade.stderr
    assert tree_of(dest) == render_files(V2, name)  # the v1-only skill is gone
    assert "removed" in upgrade.stdout and "old" in upgrade.stdout
    assert not any("old" in p.name for p in dest.rglob("*"))  # its folder too

    victim = sorted(render_files(V2, name))[0]
    (dest / victim).write_text("tampered\n")
    refused = run_sh(v1, dest, home)
    assert refused.returncode == 3, refused
    assert f"changed since installed: {victim}" in refused.stderr
    assert (dest / victim).read_text() == "tampered\n"  # nothing overwritten
    assert InstallRecord.parse((dest / RECORD_FILE).read_text()).release_id == R2

    pinned = run_sh(v1, dest, home, env={"REEF_HARNESS_FORCE": "1"})
    assert pinned.returncode == 0, pinned.stderr
    assert tree_of(dest) == render_files(V1, name)  # the older release, pinned
    assert InstallRecord.parse((dest / RECORD_FILE).read_text()).release_id == R1

    removed = run_sh(v1, dest, home, "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not dest.exists()
    assert run_sh(v1, dest, home, "--uninstall").returncode == 1  # nothing to remove


def test_a_corrupted_script_writes_nothing(home: Path) -> None:
    text = script(V1, "claude", R1).replace("Do a.\n", "Do b.\n")
    dest = home / "dest"
    done = run_sh(text, dest, home)
    assert done.returncode == 4, done
    assert "sha256 mismatch" in done.stderr
    assert tree_of(dest) == {}  # the staging folder is gone as well
    assert not (dest / RECORD_FILE).exists()


def test_a_missing_file_is_restored_by_a_rerun(home: Path) -> None:
    text, dest = script(V1, "codex", R1), home / "dest"
    assert run_sh(text, dest, home).returncode == 0
    (dest / "AGENTS.md").unlink()
    again = run_sh(text, dest, home)
    assert again.returncode == 0 and "already current" not in again.stdout
    assert tree_of(dest) == render_files(V1, "codex")


def test_the_script_carries_no_token_and_fetches_nothing(home: Path) -> None:
    text = script(V1, "claude", R1)
    for word in ("curl", "wget", "http", "Authorization", "REEF_TOKEN"):
        assert word not in text
    # no network tool on PATH: the install still succeeds
    bare = home / "bin"
    bare.mkdir()
    tools = ("sh", "sha256sum", "cut", "sed", "head", "mkdir", "mv", "rm", "rmdir", "cat")
    for tool in (*tools, "dirname", "grep"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True)
        os.symlink(found.stdout.strip(), bare / tool)
    done = run_sh(text, home / "dest", home, env={"PATH": str(bare)})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("escape", ["../outside.txt", "/tmp/outside.txt", "a/../../outside.txt"])
def test_a_record_naming_a_path_outside_dest_is_refused(home: Path, escape: str) -> None:
    text, dest = script(V1, "generic", R1), home / "dest"
    assert run_sh(text, dest, home).returncode == 0
    outside = home / "outside.txt"
    outside.write_text("keep me\n")
    record = dest / RECORD_FILE
    record.write_text(record.read_text() + f"file {'0' * 64} {escape}\n")
    for args in (("--uninstall",), ()):
        done = run_sh(script(V2, "generic", R2), dest, home, *args)
        assert done.returncode == 2, done
        assert "refusing unsafe path" in done.stderr
    assert outside.read_text() == "keep me\n"
    with pytest.raises(UnsafeHarnessPathError):
        InstallRecord.parse(record.read_text())
