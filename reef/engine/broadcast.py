"""The trainer's side of SGLang's weight broadcast: rank 0 of a fresh process group.

Order of one :func:`publish_weights` (slime's ``update_weight_from_distributed``):

1. POST ``/init_weights_update_group`` to every engine (engine *i* gets
   ``rank_offset = 1 + ranks before it``) in threads, *while* this process joins as rank
   0 with ``init_process_group`` — the rendezvous blocks until every rank is in, so the
   two must overlap. Then every engine's answer must be ``success``.
2. POST ``/update_weights_from_distributed {names, dtypes, shapes, weight_version}`` to
   every engine in threads, while this process broadcasts each tensor (``src=0``) in
   the announced order; wait for the broadcasts, then for every engine's answer.
3. Always: POST ``/destroy_weights_update_group`` to every engine and destroy the group,
   so a failed publish leaves no group behind on either side.

An engine that cannot join makes step 1 fail after ``timeout_s`` (the rendezvous cannot
be interrupted). The process must not already have a default process group.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from reef.engine import engine_client as calls
from reef.engine.default_group import forget_failed_join
from reef.engine.engine_client import EngineClient, UpdateResult
from reef.engine.errors import EngineUnavailableError, WeightPublishError
from reef.modelkit.weights import dtype_name

DEFAULT_GROUP = "weight_update_group"


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one publish moved, and how long it took end to end."""

    weight_version: str
    engines: tuple[str, ...]
    tensors: int
    bytes: int
    seconds: float


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def named_tensors(
    weights: torch.nn.Module | Mapping[str, torch.Tensor], device: torch.device
) -> list[tuple[str, torch.Tensor]]:
    """(name, contiguous tensor on ``device``) in state-dict order."""
    state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
    return [(name, t.detach().to(device).contiguous()) for name, t in state.items()]


def _post_all(
    pool: ThreadPoolExecutor, clients: Sequence[EngineClient], make: list[calls.Call[UpdateResult]]
) -> list[Future[UpdateResult]]:
    return [pool.submit(client.call, call) for client, call in zip(clients, make, strict=True)]


def _expect(futures: list[Future[UpdateResult]], urls: Sequence[str], step: str) -> None:
    failures = []
    for url, future in zip(urls, futures, strict=True):
        try:
            result = future.result()
        except EngineUnavailableError as exc:
            failures.append(f"{url}: {exc}")
            continue
        if not result.success:
            failures.append(f"{url}: {result.message}")
    if failures:
        raise WeightPublishError(
            f"{step} failed on {len(failures)} engine(s): " + "; ".join(failures)
        )


def publish_weights(
    weights: torch.nn.Module | Mapping[str, torch.Tensor],
    engines: Sequence[str],
    weight_version: str,
    *,
    master_address: str = "127.0.0.1",
    master_port: int | None = None,
    backend: str = "gloo",
    group_name: str = DEFAULT_GROUP,
    engine_ranks: Sequence[int] | None = None,
    timeout_s: float = 300.0,
) -> PublishResult:
    """Broadcast ``weights`` to every engine and make them serve ``weight_version``.

    ``engine_ranks`` gives the ranks each engine takes (its tensor-parallel size; 1 for
    ``reef engine``). gloo sends CPU tensors, nccl CUDA tensors.
    """
    if not engines:
        raise WeightPublishError("no engines to publish to")
    if dist.is_initialized():
        raise WeightPublishError("this process already has a default process group")
    started = time.monotonic()
    ranks = list(engine_ranks or [1] * len(engines))
    offsets = [1 + sum(ranks[:index]) for index in range(len(engines))]
    world_size = 1 + sum(ranks)
    port = master_port or free_port(master_address)
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if backend == "nccl"
        else torch.device("cpu")
    )
    tensors = named_tensors(weights, device)
    clients = [EngineClient(url, timeout_s=timeout_s) for url in engines]
    try:
        with ThreadPoolExecutor(max_workers=len(engines)) as pool:
            inits = _join(
                pool,
                clients,
                offsets,
                world_size,
                master_address,
                port,
                backend=backend,
                group_name=group_name,
                timeout_s=timeout_s,
            )
            try:
                _expect(inits, engines, "init_weights_update_group")
                _send(pool, clients, engines, tensors, group_name, weight_version)
            finally:
                _leave(pool, clients, group_name)
    finally:
        for client in clients:
            client.close()
    size = sum(t.numel() * t.element_size() for _, t in tensors)
    return PublishResult(
        weight_version, tuple(engines), len(tensors), size, time.monotonic() - started
    )


def _join(
    pool: ThreadPoolExecutor,
    clients: Sequence[EngineClient],
    offsets: list[int],
    world_size: int,
    address: str,
    port: int,
    *,
    backend: str,
    group_name: str,
    timeout_s: float,
) -> list[Future[UpdateResult]]:
    """Join as rank 0 while the engines are asked to join; returns their answers."""
    inits = _post_all(
        pool,
        clients,
        [
            calls.init_weights_update_group(
                address, port, offset, world_size, group_name=group_name, backend=backend
            )
            for offset in offsets
        ],
    )
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            world_size=world_size,
            rank=0,
            timeout=timedelta(seconds=timeout_s),
        )
    except (RuntimeError, ValueError) as exc:
        forget_failed_join()
        answers = [f.result() for f in inits if f.done() and f.exception() is None]
        raise WeightPublishError(
            f"rank 0 could not form the group: {exc}; engines: {answers}"
        ) from exc
    return inits


def _send(
    pool: ThreadPoolExecutor,
    clients: Sequence[EngineClient],
    urls: Sequence[str],
    tensors: list[tuple[str, torch.Tensor]],
    group_name: str,
    weight_version: str,
) -> None:
    call = calls.update_weights_from_distributed(
        [name for name, _ in tensors],
        [dtype_name(t.dtype) for _, t in tensors],
        [list(t.shape) for _, t in tensors],
        group_name=group_name,
        weight_version=weight_version,
    )
    updates = _post_all(pool, clients, [call] * len(clients))
    try:
        handles = [dist.broadcast(t, src=0, async_op=True) for _, t in tensors]
        for handle in handles:
            if handle is not None:
                handle.wait()
    except RuntimeError as exc:
        raise WeightPublishError(f"broadcast failed: {exc}") from exc
    _expect(updates, urls, "update_weights_from_distributed")


def _leave(pool: ThreadPoolExecutor, clients: Sequence[EngineClient], group_name: str) -> None:
    """Best effort on the engines' side; the local group is always destroyed."""
    leaves = _post_all(
        pool, clients, [calls.destroy_weights_update_group(group_name)] * len(clients)
    )
    try:
        dist.destroy_process_group()
    finally:
        for future in leaves:
            future.exception()
