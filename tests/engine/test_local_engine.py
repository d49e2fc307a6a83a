"""The local engine ``reef serve`` starts gets the tool-call parser and the device of its
settings (``REEF_ENGINE_TOOL_CALL_PARSER``, ``REEF_ENGINE_DEVICE``, passed as ``reef engine
--tool-call-parser`` and ``--device``): a value the engine cannot use stops it, and the
error carries the engine's own words."""

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


async def test_the_device_reaches_the_engine(tmp_path: Path) -> None:
    # REEF_ENGINE_DEVICE is passed as reef engine --device: a CUDA device this machine
    # lacks stops the engine before it loads anything, in its own words
    with pytest.raises(ConfigError, match=r"--device cuda:63: this machine has \d+ CUDA"):
        async with local_engine("tiny", tmp_path, None, "cuda:63"):
            pass
