"""The README's quickstart, run as written against a running ``reef serve``.

Every ```python block of README.md is executed in order, in one namespace, with two
substitutions a reader makes too: the server's address for ``http://127.0.0.1:8900`` and
its token in ``REEF_TOKEN``. Then what the quickstart promised is checked: the receipt is
in the log, the report that quoted it was accepted, and the chain holds the creation
release.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import RECEIPT
from tests.support.reef_server import ReefServer

README = Path(__file__).resolve().parents[2] / "README.md"
DEFAULT_ADDRESS = "http://127.0.0.1:8900"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def log_kind() -> str:
    return "embedded"  # the quickstart's default; test_quickstart.py covers both logs


@pytest.fixture(scope="module")
def reef_options() -> dict[str, Any]:
    return {"token": "reef-local"}


def python_blocks(text: str) -> list[str]:
    return PYTHON_BLOCK.findall(text)


def test_python_blocks_are_found() -> None:
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = 2\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = 2\n"]


def test_the_readme_quickstart_runs_against_reef_serve(
    reef_server: ReefServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no ```python block"
    assert reef_server.token is not None
    monkeypatch.setenv("REEF_TOKEN", reef_server.token)
    namespace: dict[str, Any] = {"__name__": "readme"}
    try:
        for block in blocks:
            assert DEFAULT_ADDRESS in block, "the quickstart talks to reef serve's default address"
            code = compile(block.replace(DEFAULT_ADDRESS, reef_server.base_url), "README", "exec")
            exec(code, namespace)
    finally:  # a script's clients close when it exits; here the test closes them
        for client in ("agent", "reef"):
            if client in namespace:
                namespace[client].close()

    receipt = namespace["receipt"]
    assert RECEIPT.match(receipt), receipt
    assert [e.event_id for e in reef_server.inference("hello-reef")] == [receipt]
    assert namespace["fate"]["status"] == "accepted", namespace["fate"]
    (creation,) = namespace["chain"]
    assert creation["operation"] == "creation" and creation["current"] is True
