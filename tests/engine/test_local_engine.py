"""The local engine ``reef serve`` starts gets the tool-call parser of its settings
(``REEF_ENGINE_TOOL_CALL_PARSER``, passed as ``reef engine --tool-call-parser``): a name
the engine does not know stops it, and the error carries the engine's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from reef.core.errors import ConfigError
from reef.local_engine import local_engine


async def test_the_parser_reaches_the_engine(tmp_path: Path) -> None:
    refused = "Invalid value for '--tool-call-parser': 'no-such-parser'"
    with pytest.raises(ConfigError, match=refused):
        async with local_engine("tiny", tmp_path, "no-such-parser"):
            pass
