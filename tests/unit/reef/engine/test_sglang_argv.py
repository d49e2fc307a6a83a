"""The command ``reef engine --backend sglang`` starts (pure; SGLang never runs here)."""

from __future__ import annotations

import pytest

from reef.engine.errors import EngineError
from reef.engine.sglang_launch import SglangLaunch, exit_status, sglang_argv


def test_the_argv_runs_launch_server_with_reefs_model_host_and_port_then_the_extra_flags() -> None:
    launch = SglangLaunch(
        model="/models/qwen3-0.6b",
        host="0.0.0.0",
        port=30001,
        extra_args=("--tp-size", "2", "--enable-lora"),
        python="/opt/py/bin/python",
    )
    assert sglang_argv(launch) == [
        "/opt/py/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/qwen3-0.6b",
        "--host",
        "0.0.0.0",
        "--port",
        "30001",
        "--tp-size",
        "2",
        "--enable-lora",
    ]


@pytest.mark.parametrize("flag", ["--port", "--port=1", "--model-path", "--host=::"])
def test_extra_flags_may_not_override_what_reef_sets(flag: str) -> None:
    with pytest.raises(EngineError, match=flag.split("=")[0]):
        sglang_argv(SglangLaunch(model="m", extra_args=("--tp-size", "1", flag)))


def test_the_url_brackets_an_ipv6_host() -> None:
    assert SglangLaunch(model="m", host="::1", port=5).url == "http://[::1]:5"
    assert SglangLaunch(model="m", port=5).url == "http://127.0.0.1:5"


def test_a_child_killed_by_a_signal_reports_as_a_shell_does() -> None:
    assert (exit_status(0), exit_status(3), exit_status(-15), exit_status(-9)) == (0, 3, 143, 137)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--backend", "sglang", "--device", "cuda:1"], "--device is Reef's engine's only"),
        (["--backend", "sglang", "--group-timeout", "5"], "--group-timeout is Reef's"),
        (["--sglang-args", "--tp-size 2"], "--sglang-args goes with --backend sglang only"),
        (["--ready-timeout", "5"], "--ready-timeout goes with --backend sglang only"),
    ],
)
def test_an_option_the_chosen_backend_would_ignore_is_refused(args: list[str], named: str) -> None:
    from click.testing import CliRunner

    from reef.cli.engine import engine

    result = CliRunner().invoke(engine, ["--model", "m", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith("reef engine: ") and named in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
