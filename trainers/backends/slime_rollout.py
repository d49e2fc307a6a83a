"""slime's rollout function for Reef batches: runs *inside slime* (its rollout Ray actor).

Named on slime's command line by :mod:`trainers.backends.slime_job`
(``--rollout-function-path trainers.backends.slime_rollout.generate_rollout``). It returns
the recorded answers of the JSON-lines file named by ``args.reef_rollouts_path`` as slime
``Sample`` groups, the same ones for every ``rollout_id`` (each rollout is one optimiser
step over the batch). Imports only the standard library and slime, since slime may run
under another interpreter than Reef's. Not run here: slime needs GPUs, Megatron-LM and
Ray; the tests check the file it reads and this function with a stand-in ``Sample``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_samples(path: Path, make: Callable[..., Any], rollout_id: int) -> list[list[Any]]:
    """One group of one ``Sample`` per line, completed, tagged with ``rollout_id``."""
    status = make.Status.COMPLETED if hasattr(make, "Status") else "completed"
    groups = []
    for line in path.read_text().splitlines():
        fields = json.loads(line)
        groups.append([make(**fields, rollout_id=rollout_id, status=status)])
    return groups


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's ``generate_rollout(args, rollout_id, data_source, evaluation)`` signature."""
    if evaluation:
        raise ValueError("Reef's gate evaluates candidates; slime's eval rollouts are unused")
    sample = importlib.import_module("slime.utils.types").Sample
    output = importlib.import_module("slime.rollout.base_types").RolloutFnTrainOutput
    groups = read_samples(Path(args.reef_rollouts_path), sample, rollout_id)
    return output(samples=groups, metrics={"reef/samples": len(groups)})
