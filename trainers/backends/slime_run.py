"""``training.backend: slime``: run slime's ``train.py`` on a Reef batch, collect the candidate.

The adapter of :mod:`trainers.backends.slime_job` (which documents the command and why):

1. check that ``training.slime.python`` (default: Reef's interpreter) can import slime
   (THUDM/slime, from its source checkout) and that ``train_script`` exists, else
   :class:`TrainingError` with one line: that candidate fails, the trainer goes on;
2. write the batch and slime's custom config to a scratch folder;
3. run the command (Reef's root on ``PYTHONPATH``, so slime's Ray actors import the
   rollout function) with ``training.slime.timeout_s``; its output goes to a log in the
   scratch folder, whose last line a failure quotes;
4. the candidate is ``out_dir`` as slime's HF export left it (``config.json`` required).

Not run here: slime needs GPUs, Megatron-LM, Ray and SGLang's package. The tests check
the files and command (:mod:`trainers.backends.slime_job`) and step 1 through the trainer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from recipes.errors import TrainingError
from recipes.training import GrpoTraining, Rollout, SlimeSettings
from trainers.backends.slime_job import slime_job

#: the folder that holds ``trainers`` (slime's actors import the rollout function from it)
REEF_ROOT = Path(__file__).resolve().parents[2]
_PROBE = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('slime.rollout') else 3)"


def slime_missing(python: str) -> str | None:
    """One line saying slime cannot be used from ``python``, or None when it can."""
    try:
        found = subprocess.run([python, "-c", _PROBE], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"training.backend slime: cannot run {python} ({type(exc).__name__})"
    if found == 0:
        return None
    return (
        f"training.backend slime: slime (THUDM/slime, installed from its source checkout; "
        f"not the unrelated PyPI package of that name) is not importable by {python}; "
        "it trains on GPUs with Megatron-LM and Ray"
    )


def train_grpo_slime(
    parent: Path | None, rollouts: Sequence[Rollout], out_dir: Path, options: GrpoTraining
) -> dict[str, float]:
    """GRPO steps on ``rollouts`` by slime; the candidate is written to ``out_dir``."""
    settings = _usable(options)
    python = settings.python or sys.executable
    with tempfile.TemporaryDirectory(prefix="reef-slime-") as scratch:
        work = Path(scratch)
        job = slime_job(
            rollouts, options, python=python, parent=parent, out_dir=out_dir, work_dir=work
        )
        for path, text in job.files.items():
            path.write_text(text)
        started = time.monotonic()
        _run(job.argv, work / "slime.log", settings.timeout_s)
    if not (out_dir / "config.json").is_file():
        raise TrainingError(f"slime finished but wrote no HF checkpoint to {out_dir}")
    return {"samples": float(len(rollouts)), "seconds": time.monotonic() - started}


def _usable(options: GrpoTraining) -> SlimeSettings:
    settings = options.slime
    if settings is None:
        raise TrainingError("training.backend slime needs training.slime")
    problem = slime_missing(settings.python or sys.executable)
    if problem is not None:
        raise TrainingError(problem)
    if not Path(settings.train_script).is_file():
        raise TrainingError(f"training.slime.train_script {settings.train_script!r} is no file")
    return settings


def _run(argv: list[str], log: Path, timeout_s: float) -> None:
    # the child needs the rest of the environment (CUDA, Ray); only PYTHONPATH is added
    paths = [str(REEF_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    with log.open("wb") as out:
        try:
            status = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired as exc:
            raise TrainingError(f"slime's train.py ran past {timeout_s:g} s") from exc
    if status != 0:
        lines = log.read_text(errors="replace").strip().splitlines()
        raise TrainingError(
            f"slime's train.py exited with status {status}: {lines[-1] if lines else ''}"
        )
