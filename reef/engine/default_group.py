"""The one torch quirk both sides of a weight broadcast must undo after a failed join.

torch names a process group it creates without a name (the default group too) by a
per-process counter, and that name prefixes the group's rendezvous keys. A failed
``init_process_group`` (a peer that never came, a timeout) has already taken a number and
leaves no group to destroy, and torch resets the counter only when the default group is
destroyed. So the next join in that process keys its rendezvous under another prefix than
its peers' and waits out its whole timeout: one failed broadcast would make every later
one fail. :func:`forget_failed_join` resets the counter as destroying the group would.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed import distributed_c10d


def forget_failed_join() -> None:
    """After a failed ``init_process_group``: number the next group as in a fresh process
    (nothing to do when a default group exists: it was not this join that failed)."""
    if not dist.is_initialized():
        distributed_c10d._world.group_count = 0
