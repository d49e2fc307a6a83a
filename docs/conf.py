"""Sphinx configuration of Reef's documentation site (MyST Markdown, the Furo theme).

Built strictly: ``python -m sphinx -W --keep-going -b html docs <out>`` fails on any
warning (a broken link or anchor, a page in no table of contents); the test
``tests/architecture/test_docs_site.py`` runs that build.
"""

project = "Reef"
author = "The Reef authors"
copyright = "the Reef authors, Apache-2.0"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/_build"]

myst_heading_anchors = 3  # [text](page.md#a-heading) links, checked like pages
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "furo"
html_title = "Reef"
html_static_path: list[str] = []
html_show_sourcelink = False

nitpicky = True
