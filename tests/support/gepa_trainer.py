"""``gepa``'s trainer and the release chain in one process over an embedded log, with the
scripted stand-in in-process (for kill tests: SIGKILL it, start it again)::

    python -m tests.support.gepa_trainer STATE_DIR [--stall MARKER_FILE TEXT]

With ``--stall`` the first reflection request containing ``TEXT`` writes
``MARKER_FILE`` and hangs: the process is then mid-step (parent drawn, minibatch run,
nothing proposed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Final

from recipes.chat import ChatEndpoint
from recipes.gepa.reflection import REFLECTION_MARKER
from recipes.registry import build_recipe
from reef.testing.harness_upstream import StandInChat
from tests.support.trainer_harness import embedded_world
from trainers.consumer import Trainer, TrainerConfig

VALIDATION: Final = ["lantern", "pebble", "harbor", "violet"]
CONFIG: Final[dict[str, Any]] = {
    "batching": {"batch_size": 3},
    "upstream": {"base_url": "http://stand-in.invalid/v1", "model": "stub"},
    "evaluation": {
        "tasks": [{"prompt": f"Task: {w}", "answer": w[::-1]} for w in VALIDATION],
        "grader": "exact",
        "max_new_tokens": 32,
    },
    "gepa": {"seed": 0},
}


class StallingChat(StandInChat):
    """The stand-in, hanging at a reflection request showing ``text`` after writing
    ``marker``."""

    def __init__(self, marker: Path, text: str) -> None:
        super().__init__()
        self.marker = marker
        self.text = text

    def complete(
        self, endpoint: ChatEndpoint, messages: list[dict[str, str]], *, max_tokens: int
    ) -> str:
        reflecting = messages[0]["content"].startswith(REFLECTION_MARKER)
        if reflecting and self.text in messages[-1]["content"]:
            self.marker.write_text("reflecting\n")
            time.sleep(3600)  # until killed
        return super().complete(endpoint, messages, max_tokens=max_tokens)


async def serve(state: Path, stall: list[str] | None) -> None:
    async with embedded_world(state) as world:
        chat = StallingChat(Path(stall[0]), stall[1]) if stall else StandInChat()
        recipe = build_recipe("gepa", CONFIG, chat=chat)
        config = TrainerConfig("gepa", "kill", state / "trainer")
        trainer = Trainer(recipe, world.store, world.content, config)
        print("ready", flush=True)
        await trainer.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state", type=Path)
    parser.add_argument("--stall", nargs=2, metavar=("MARKER_FILE", "TEXT"), default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    asyncio.run(serve(args.state, args.stall))


if __name__ == "__main__":
    main()
