"""TEST STAND-IN for ``python -m sglang.launch_server`` (see the package docstring).

Accepts ``--model-path``, ``--host`` and ``--port`` as SGLang does and serves Reef's
engine (``reef.cli.engine.run``) there; any other flag is refused, so a test cannot
pass SGLang flags it believes were honoured.
"""

from __future__ import annotations

import argparse

from reef.cli.engine import run
from reef.engine.config import EngineConfig


def main() -> None:
    parser = argparse.ArgumentParser(prog="sglang.launch_server (Reef test stand-in)")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    run(EngineConfig(model=args.model_path, host=args.host, port=args.port, log_level="warning"))


if __name__ == "__main__":
    main()
