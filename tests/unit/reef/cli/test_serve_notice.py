"""What ``reef serve`` says at start when no upstream is configured (printed to stderr
beside the listening line; tests/e2e/test_sao_learning.py sees it from a real server)."""

from __future__ import annotations

from reef.cli.serve import no_upstream_notice
from reef.settings import Settings


def test_without_an_upstream_it_names_the_tiny_model_and_the_ways_out() -> None:
    notice = no_upstream_notice(Settings())
    assert notice is not None
    assert "no upstream is configured, so a local engine serves the built-in tiny model" in notice
    assert "untrained" in notice
    assert "--upstream-url" in notice and "REEF_UPSTREAM_URL" in notice
    assert "reef demo" in notice


def test_another_local_model_is_named_as_it_is() -> None:
    notice = no_upstream_notice(Settings.of(engine_model="/models/qwen"))
    assert notice is not None and "'/models/qwen'" in notice
    assert "built-in tiny model" not in notice


def test_with_an_upstream_it_says_nothing() -> None:
    assert no_upstream_notice(Settings.of(upstream_url="https://api.openai.com/v1")) is None
