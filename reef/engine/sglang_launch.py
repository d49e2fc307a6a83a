"""``reef engine --backend sglang``: run SGLang's own server as a child and wait until it serves.

Read from sgl-project/sglang (``python/sglang/launch_server.py`` at 046a9e4, and
``python/sglang/srt/entrypoints/http_server.py`` of the same era): the server is started
with ``python -m sglang.launch_server --model-path … --host … --port …`` (and
``--sampling-defaults …`` when ``reef engine`` is given its own; any other ``ServerArgs``
flag passes through); ``GET /health`` answers 503 while the server is
starting and 200 once it serves; ``GET /get_model_info`` answers the model path. Reef's
own engine answers the same routes, which is what the sidecar drives either way.

Torch-free. :func:`sglang_argv` is pure; :func:`run_sglang` is the adapter:

1. start the child with this interpreter (``sys.executable``), output inherited;
2. forward SIGTERM and SIGINT to it, so stopping ``reef engine`` stops SGLang;
3. poll ``/health`` then ``/get_model_info`` until both answer, or the child dies
   (its status is returned), or the wait times out (the child is terminated, status 1);
4. announce the URL the sidecar should use (``reef sidecar --engine URL``) and wait for
   the child;
   its status is the command's (a child killed by signal N gives 128 + N, as a shell does).
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from reef.engine.engine_client import EngineClient
from reef.engine.errors import EngineError, EngineUnavailableError

#: flags the launcher sets itself; ``--sglang-args`` may not repeat them
RESERVED_FLAGS = ("--model-path", "--host", "--port")
#: SGLang's flag that ``reef engine --sampling-defaults`` becomes
SAMPLING_DEFAULTS_FLAG = "--sampling-defaults"
_POLL_S = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangLaunch:
    """What ``reef engine --backend sglang`` starts."""

    model: str
    host: str = "127.0.0.1"
    port: int = 30000
    #: further ``sglang.launch_server`` flags, passed through unchanged
    extra_args: tuple[str, ...] = ()
    #: ``reef engine --sampling-defaults``, passed on as SGLang's own flag; unset: not
    #: passed (SGLang's default, ``model``, is Reef's)
    sampling_defaults: str | None = None
    #: the interpreter that runs SGLang (the one running Reef)
    python: str = sys.executable
    #: seconds to wait for ``/health`` and ``/get_model_info`` (large models load slowly)
    ready_timeout_s: float = 900.0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def sglang_argv(launch: SglangLaunch) -> list[str]:
    """The child's command line (EngineError when ``extra_args`` repeats a flag the
    launcher sets: the reserved ones, and ``--sampling-defaults`` when Reef's is given)."""
    passed: tuple[str, ...] = ()
    if launch.sampling_defaults is not None:
        passed = (SAMPLING_DEFAULTS_FLAG, launch.sampling_defaults)
    taken = (*RESERVED_FLAGS, *passed[:1])
    for arg in launch.extra_args:
        flag = arg.split("=", 1)[0]
        if flag in taken:
            raise EngineError(f"--sglang-args may not set {flag}: use reef's option")
    return [
        launch.python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        launch.model,
        "--host",
        launch.host,
        "--port",
        str(launch.port),
        *passed,
        *launch.extra_args,
    ]


def sglang_missing_message(python: str = sys.executable) -> str | None:
    """One line saying how to get SGLang, or None when this interpreter can import it."""
    if importlib.util.find_spec("sglang") is not None:
        return None
    return (
        f"sglang is not importable by {python}; install it into that environment "
        f'({python} -m pip install "sglang[all]", see docs.sglang.ai) on a machine with '
        "an NVIDIA GPU and CUDA (SGLang does not serve on a plain CPU)"
    )


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it (killed by signal N → 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def run_sglang(
    launch: SglangLaunch, *, say: Callable[[str], None], announce: Callable[[str], None]
) -> int:
    """Start SGLang, wait until it serves, ``announce`` its URL and return its exit status;
    ``say`` reports why it stopped early."""
    child = subprocess.Popen(sglang_argv(launch))
    previous = _forward_signals(child)
    try:
        if not _wait_ready(child, launch):
            if child.poll() is None:
                say(f"SGLang did not answer /health within {launch.ready_timeout_s:g} s")
                child.terminate()
                child.wait()
                return 1
            say(f"SGLang exited with status {exit_status(child.returncode)} before it served")
            return exit_status(child.returncode)
        announce(
            f"SGLang (pid {child.pid}) serves {launch.model}: reef sidecar --engine {launch.url}"
        )
        return exit_status(child.wait())
    finally:
        _restore_signals(previous)


def _wait_ready(child: subprocess.Popen[bytes], launch: SglangLaunch) -> bool:
    deadline = time.monotonic() + launch.ready_timeout_s
    with EngineClient(launch.url, timeout_s=5.0) as client:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                return False
            if _answers(client):
                return True
            time.sleep(_POLL_S)
    return False


def _answers(client: EngineClient) -> bool:
    try:
        return client.health() and bool(client.model_info().model_path)
    except EngineUnavailableError:  # not listening yet, or still starting
        return False


_Handler = Callable[[int, FrameType | None], object] | int | None
_FORWARDED = (signal.SIGTERM, signal.SIGINT)


def _forward_signals(child: subprocess.Popen[bytes]) -> Sequence[_Handler]:
    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    return [signal.signal(signum, forward) for signum in _FORWARDED]


def _restore_signals(previous: Sequence[_Handler]) -> None:
    for signum, handler in zip(_FORWARDED, previous, strict=True):
        signal.signal(signum, handler)
