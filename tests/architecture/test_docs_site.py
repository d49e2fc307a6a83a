"""The documentation site builds strictly, and the README's links lead somewhere.

The site is ``docs/`` built by Sphinx with MyST and Furo (``docs/conf.py``). The build runs
with ``-W --keep-going``: any warning fails it, among them a link to a page or heading
that does not exist and a page that no table of contents includes (add it to a
``toctree`` in ``docs/index.md``). The README is read on its own (on a forge, in the
package), so its relative links are checked here as files.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: [text](target) where target is not a URL, mail address or in-page anchor
RELATIVE_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def test_the_docs_site_builds_without_a_warning(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-q",
        "-b",
        "html",
        "-d",
        str(tmp_path / "doctrees"),
        str(REPO / "docs"),
        str(tmp_path / "html"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, (
        "the docs site did not build strictly (python -m sphinx -W --keep-going -b html "
        f"docs docs/_build):\n{result.stderr}{result.stdout}"
    )
    assert (tmp_path / "html" / "index.html").is_file()


def relative_links(text: str) -> list[str]:
    return [target.split("#", 1)[0] for target in RELATIVE_LINK.findall(text)]


def test_relative_links_are_read_as_files() -> None:
    text = "[a](docs/x.md#h) [b](https://e.org/y) [c](#top) ![d](docs/p.png)"
    assert relative_links(text) == ["docs/x.md", "docs/p.png"]


def test_every_relative_link_of_the_readme_exists() -> None:
    links = relative_links((REPO / "README.md").read_text())
    assert links, "README.md links to no file"
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
