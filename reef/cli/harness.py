"""``reef harness install|status|uninstall``: a scenario's harness as an agent's files.

``install`` fetches ``GET /reef/harness/install`` and runs the script with ``sh`` (the
same script a ``curl … | sh`` user runs, so both paths are one code path); ``status``
compares the install record in ``DEST`` with the chain's head and the files on disk,
and prints the command that updates it; ``uninstall`` removes exactly the files the
record lists (refusing changed ones unless ``--force``), offline.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx

from reef.harness import RECORD_FILE, InstallRecord
from reef.harness.errors import HarnessTreeError

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DEST = Path("reef-harness")


def _common(fn: F) -> F:
    decorators = [
        click.option("--adapter", required=True, help="Agent layout: claude, codex, generic."),
        click.option("--scenario", required=True, help="The harness scenario."),
        click.option(
            "--url",
            envvar="REEF_URL",
            default="http://127.0.0.1:8900",
            show_default=True,
            help="Reef API (default: $REEF_URL).",
        ),
        click.option("--token", envvar="REEF_TOKEN", help="Bearer token (default: $REEF_TOKEN)."),
        click.argument(
            "dest", required=False, type=click.Path(path_type=Path), default=DEFAULT_DEST
        ),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


@click.group("harness")
def harness() -> None:
    """Install a scenario's harness release into an agent's folder, check it, remove it."""


def _get(url: str, token: str | None, path: str, scenario: str, **params: str) -> httpx.Response:
    headers = {"x-reef-scenario": scenario}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        response = httpx.get(f"{url.rstrip('/')}{path}", headers=headers, params=params, timeout=60)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from exc
    if response.status_code != 200:
        raise click.ClickException(f"{path}: {response.status_code} {response.text}")
    return response


@harness.command("install")
@_common
@click.option("--release", "release", help="Install this release instead of the head.")
def install(
    adapter: str, scenario: str, url: str, token: str | None, dest: Path, release: str | None
) -> None:
    """Install (or update to) the head release, or a pinned one, into DEST."""
    params = {"adapter": adapter, **({"release_id": release} if release else {})}
    script = _get(url, token, "/reef/harness/install", scenario, **params).text
    done = subprocess.run(["sh", "-s", "--", str(dest)], input=script, text=True, check=False)
    if done.returncode != 0:
        raise click.exceptions.Exit(done.returncode)


def _record(dest: Path) -> InstallRecord:
    path = dest / RECORD_FILE
    if not path.is_file():
        raise click.ClickException(f"no Reef harness is installed in {dest}")
    try:
        return InstallRecord.parse(path.read_text(encoding="utf-8"))
    except HarnessTreeError as exc:
        raise click.ClickException(f"{path}: {exc}") from exc


def _changed(dest: Path, record: InstallRecord) -> list[str]:
    """Recorded files that are gone or whose bytes differ from what was installed."""
    changed = []
    for path, digest in record.files.items():
        target = dest / path
        if not target.is_file() or hashlib.sha256(target.read_bytes()).hexdigest() != digest:
            changed.append(path)
    return changed


def _check(record: InstallRecord, adapter: str, scenario: str) -> None:
    if (record.adapter, record.scenario) != (adapter, scenario):
        raise click.ClickException(
            f"the install is {record.adapter} for scenario {record.scenario!r}, "
            f"not {adapter} for {scenario!r}"
        )


@harness.command("status")
@_common
def status(adapter: str, scenario: str, url: str, token: str | None, dest: Path) -> None:
    """Say whether DEST holds the head release, and how to update it when it does not."""
    record = _record(dest)
    _check(record, adapter, scenario)
    head = _get(url, token, "/reef/harness/releases", scenario).json()["head"]
    click.echo(f"installed: release {record.release_id} ({adapter}) in {dest}")
    for path in _changed(dest, record):
        click.echo(f"changed since installed: {path}")
    if head == record.release_id:
        click.echo("current: the installed release is the head of the chain")
        return
    command = ["reef", "harness", "install", "--adapter", adapter, "--scenario", scenario]
    if url != "http://127.0.0.1:8900":
        command += ["--url", url]
    click.echo(f"behind: the head is release {head}")
    click.echo(f"update with: {shlex.join([*command, str(dest)])}")


@harness.command("uninstall")
@_common
@click.option("--force", is_flag=True, help="Remove files changed since they were installed.")
def uninstall(
    adapter: str, scenario: str, url: str, token: str | None, dest: Path, force: bool
) -> None:
    """Remove the files the install in DEST wrote (offline: the record lists them)."""
    record = _record(dest)
    _check(record, adapter, scenario)
    changed = [p for p in _changed(dest, record) if (dest / p).is_file()]
    if changed and not force:
        raise click.ClickException(f"changed since installed (--force removes them): {changed}")
    for path in record.files:
        (dest / path).unlink(missing_ok=True)
        parent = (dest / path).parent
        while parent != dest and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    (dest / RECORD_FILE).unlink()
    if not any(dest.iterdir()):
        dest.rmdir()
    click.echo(f"uninstalled release {record.release_id} from {dest}")
