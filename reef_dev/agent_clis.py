"""The real coding-agent CLIs, Claude Code and Codex, pointed at a Reef (or provider) URL,
for the tests and the benchmarks alike.

``scripts/bootstrap`` installs the pinned npm packages under ``.tools/agents`` (their
native linux binaries come as optional dependencies); :func:`claude_code` and
:func:`codex` build one non-interactive run: argv, a closed environment (its own HOME, so
no user configuration leaks in; telemetry, auto-updates and non-essential traffic off)
and the working directory the agent's tools act in. A caller narrows a run further
(a system prompt, fewer tools, Codex's optional blocks off) with extra arguments,
environment and ``-c`` overrides.

* Claude Code: ``claude -p PROMPT --allowedTools ...`` with ``ANTHROPIC_BASE_URL`` (the
  server root: the CLI appends ``/v1/messages``), ``ANTHROPIC_API_KEY`` (sent as
  ``x-api-key``) and ``ANTHROPIC_CUSTOM_HEADERS`` (``x-reef-scenario: ...``).
* Codex: ``codex exec`` with a model provider in ``$CODEX_HOME/config.toml``
  (``wire_api = "responses"``, ``base_url`` ending in ``/v1``, the token read from the
  ``env_key`` variable and sent as a bearer token, the scenario in ``http_headers``);
  sandbox ``workspace-write`` (writes only in its working directory and temp dirs).

A missing binary is an error naming the set-up to run, never a skip.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / ".tools" / "agents" / "node_modules"
CLAUDE_CODE_VERSION = "2.1.328"
CODEX_VERSION = "0.169.0"
TOKEN_ENV = "REEF_AGENT_TOKEN"  # noqa: S105  (a variable name): Codex reads its key from it
_ARCH = {"x86_64": ("x64", "x86_64"), "aarch64": ("arm64", "aarch64")}
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


class AgentCliMissingError(RuntimeError):
    """The pinned CLIs are not installed here."""


@dataclass(frozen=True)
class AgentRun:
    """One non-interactive agent run: what to execute, with what, where."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path

    def run(self, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _arch() -> tuple[str, str]:
    machine = platform.machine().lower()
    if machine not in _ARCH:
        raise AgentCliMissingError(f"no pinned agent CLI for {platform.system()} {machine}")
    return _ARCH[machine]


def _installed(package: str, version: str, binary: str) -> Path:
    """The package's binary, once its installed version is the pinned one."""
    folder = NODE_MODULES / package
    manifest = folder / "package.json"
    found = json.loads(manifest.read_text())["version"] if manifest.is_file() else None
    if not (folder / binary).is_file() or not str(found).startswith(version):
        raise AgentCliMissingError(
            f"{package} {version} is not installed in {NODE_MODULES} (found: {found}): "
            "run scripts/bootstrap (it installs the pinned agent CLIs there)"
        )
    return folder / binary


def claude_binary() -> Path:
    npm_arch, _ = _arch()
    return _installed(f"@anthropic-ai/claude-code-linux-{npm_arch}", CLAUDE_CODE_VERSION, "claude")


def codex_binary() -> Path:
    npm_arch, triple = _arch()
    binary = f"vendor/{triple}-unknown-linux-musl/bin/codex"
    return _installed(f"@openai/codex-linux-{npm_arch}", CODEX_VERSION, binary)


def base_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(home),
    }


def claude_code(
    prompt: str,
    *,
    base_url: str,
    token: str,
    scenario: str,
    workdir: Path,
    home: Path,
    tools: Sequence[str] = ("Write",),
    model: str = "claude-sonnet-4-5",
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> AgentRun:
    """``claude -p`` against ``base_url`` (a server root, no ``/v1``), tools allowed."""
    env = {
        **base_env(home),
        **QUIET_ENV,
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": token,
        "ANTHROPIC_CUSTOM_HEADERS": f"x-reef-scenario: {scenario}",
        **(extra_env or {}),
    }
    argv = [str(claude_binary()), "-p", prompt, "--model", model]
    argv += ["--allowedTools", ",".join(tools), "--output-format", "text", *extra_args]
    return AgentRun(argv, env, workdir)


def codex_config(*, v1_url: str, scenario: str, model: str, retries: int | None = None) -> str:
    """``config.toml``: Reef as the model provider, speaking the Responses API;
    ``retries`` (when given) for both a request and a stream, else Codex's own."""
    retry_lines = (
        []
        if retries is None
        else [f"request_max_retries = {retries}", f"stream_max_retries = {retries}"]
    )
    return "\n".join(
        [
            f"model = {json.dumps(model)}",
            'model_provider = "reef"',
            "check_for_update_on_startup = false",
            "",
            "[model_providers.reef]",
            'name = "Reef"',
            f"base_url = {json.dumps(v1_url)}",
            f'env_key = "{TOKEN_ENV}"',
            'wire_api = "responses"',
            *retry_lines,
            f"http_headers = {{ x-reef-scenario = {json.dumps(scenario)} }}",
            "",
            "[analytics]",
            "enabled = false",
            "",
        ]
    )


def codex(
    prompt: str,
    *,
    v1_url: str,
    token: str,
    scenario: str,
    workdir: Path,
    home: Path,
    model: str = "gpt-5-codex",
    sandbox: str = "workspace-write",
    retries: int | None = None,
    overrides: Sequence[str] = (),
    disabled: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> AgentRun:
    """``codex exec`` against ``v1_url`` (Reef's ``/v1``) under ``sandbox`` (by default
    writes only in ``workdir``), with ``-c`` ``overrides`` and ``disabled`` features."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = codex_config(v1_url=v1_url, scenario=scenario, model=model, retries=retries)
    (codex_home / "config.toml").write_text(config)
    env = {
        **base_env(home),
        "CODEX_HOME": str(codex_home),
        TOKEN_ENV: token,
        **(extra_env or {}),
    }
    argv = [str(codex_binary()), "exec", "--skip-git-repo-check"]
    argv += ["--sandbox", sandbox, "--cd", str(workdir)]
    for override in overrides:
        argv += ["-c", override]
    for feature in disabled:
        argv += ["--disable", feature]
    return AgentRun([*argv, prompt], env, workdir)
