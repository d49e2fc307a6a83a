"""``reef serve --print-config``: every setting with its source; flags > file > env > defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from reef.testing.servers import run_reef
from tests.support.reef_server import LOG_KINDS

TOKEN = "tok-print-config-secret"
UPSTREAM_KEY = "sk-print-config-secret"


@pytest.fixture(params=LOG_KINDS)
def log_args(request: pytest.FixtureRequest) -> list[str]:
    """``--log`` for each kind (printing the config never connects to the log)."""
    if request.param == "kafka":
        return ["--log", "kafka", "--kafka-bootstrap", "127.0.0.1:19092"]
    return ["--log", "embedded"]


def print_config(*args: str, env: dict[str, str] | None = None) -> str:
    result = run_reef(
        "serve", "--print-config", *args, env={"REEF_TOKEN": TOKEN, **(env or {})}, timeout=60
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def row(output: str, name: str) -> str:
    pattern = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
    for line in output.splitlines():
        if pattern.search(line):
            return line
    raise AssertionError(f"no line for setting {name!r} in:\n{output}")


def assert_setting(output: str, name: str, value: str | None, source: str) -> None:
    line = row(output, name)
    if value is not None:
        assert value in line, f"{name}: expected value {value!r} in {line!r}"
    assert re.search(rf"\b{source}\b", line), f"{name}: expected source {source!r} in {line!r}"


def write_config(path: Path, section: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump({"reef": section}))
    return path


def test_defaults_and_sources(log_args: list[str]) -> None:
    output = print_config(*log_args)
    assert_setting(output, "port", "8900", "default")
    assert_setting(output, "host", "127.0.0.1", "default")
    assert_setting(output, "max_body_bytes", "33554432", "default")
    assert_setting(output, "log", log_args[1], "flag")
    assert_setting(output, "token", None, "env")


def test_flags_beat_file_beats_env_beats_defaults(log_args: list[str], tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "reef.yaml",
        {
            "port": 7002,
            "state_dir": str(tmp_path / "from-yaml"),
            "upstream": {"model": "yaml-model", "dialect": "anthropic"},
        },
    )
    env = {
        "REEF_PORT": "7001",
        "REEF_UPSTREAM_MODEL": "env-model",
        "REEF_UPSTREAM_DIALECT": "openai",
        "REEF_MAX_BODY_BYTES": "5000",
    }
    output = print_config(*log_args, "-c", str(config), "--port", "7003", env=env)
    assert_setting(output, "port", "7003", "flag")
    assert_setting(output, "upstream_model", "yaml-model", "file")
    assert_setting(output, "upstream_dialect", "anthropic", "file")
    assert_setting(output, "state_dir", "from-yaml", "file")
    assert_setting(output, "max_body_bytes", "5000", "env")
    assert_setting(output, "partitions", "6", "default")
    assert "7001" not in row(output, "port") and "env-model" not in output


def test_serve_flags_are_flag_sourced(log_args: list[str], tmp_path: Path) -> None:
    output = print_config(
        *log_args,
        "--upstream-url",
        "http://127.0.0.1:9/v1",
        "--upstream-dialect",
        "anthropic",
        "--upstream-model",
        "flag-model",
        "--max-body-bytes",
        "4096",
        "--state-dir",
        str(tmp_path / "flag-state"),
        env={"REEF_UPSTREAM_MODEL": "env-model"},
    )
    assert_setting(output, "upstream_url", "http://127.0.0.1:9/v1", "flag")
    assert_setting(output, "upstream_dialect", "anthropic", "flag")
    assert_setting(output, "upstream_model", "flag-model", "flag")
    assert_setting(output, "max_body_bytes", "4096", "flag")
    assert_setting(output, "state_dir", "flag-state", "flag")


def test_env_only_settings(log_args: list[str]) -> None:
    output = print_config(
        *log_args,
        env={
            "REEF_UPSTREAM_READ_TIMEOUT_S": "7.5",
            "REEF_TOKENS": "other-secret-token:read",
        },
    )
    assert_setting(output, "upstream_read_timeout_s", "7.5", "env")
    assert_setting(output, "tokens", None, "env")


def test_secrets_are_masked(log_args: list[str]) -> None:
    output = print_config(
        *log_args,
        env={
            "REEF_UPSTREAM_API_KEY": UPSTREAM_KEY,
            "REEF_TOKENS": "other-secret-token:read",
        },
    )
    assert TOKEN not in output
    assert UPSTREAM_KEY not in output
    assert "other-secret-token" not in output
    assert_setting(output, "upstream_api_key", None, "env")


def test_unknown_setting_in_the_file_is_refused(log_args: list[str], tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.yaml", {"prot": 1})
    result = run_reef(
        "serve", "--print-config", *log_args, "-c", str(config), env={"REEF_TOKEN": TOKEN}
    )
    assert result.returncode != 0
    assert "prot" in result.stdout + result.stderr


def test_invalid_value_is_refused(log_args: list[str]) -> None:
    result = run_reef(
        "serve",
        "--print-config",
        *log_args,
        env={
            "REEF_TOKEN": TOKEN,
            "REEF_MAX_BODY_BYTES": "not-a-number",
        },
    )
    assert result.returncode != 0
    assert "max_body_bytes" in result.stdout + result.stderr
