"""The fenced blocks of a page of ``docs/``, for tests that run a page as a reader would."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: the address every page writes for a local ``reef serve``
DEFAULT_ADDRESS = "http://127.0.0.1:8900"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def page_blocks(page: str) -> list[tuple[str, str]]:
    """The page's fenced blocks, in order: (language, text)."""
    return _BLOCK.findall((DOCS / page).read_text())


def block(page: str, starting: str) -> str:
    """The page's one block whose text starts with ``starting``."""
    (found,) = [text for _, text in page_blocks(page) if text.startswith(starting)]
    return found


def as_reader(text: str, base_url: str, scenario: str) -> str:
    """A page's text with a reader's substitutions: the server's address for the default
    one, and the scenario's name for ``NAME``."""
    return text.replace(DEFAULT_ADDRESS, base_url).replace("NAME", scenario)
