"""SGLang's tensor payload as Reef writes and reads it (:mod:`reef.engine.tensor_wire`)."""

from __future__ import annotations

import base64
import io
import pickle
import re
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

from reef.engine.errors import WeightLoadError
from reef.engine.tensor_wire import deserialize_named_tensors, serialize_named_tensors


def test_cpu_tensors_round_trip_with_their_dtype_shape_and_values() -> None:
    sent = [
        ("f32", torch.arange(6.0).reshape(2, 3)),
        ("bf16", torch.linspace(-1, 1, 5, dtype=torch.bfloat16)),
        ("i64", torch.tensor([[1, -2]], dtype=torch.int64)),
        ("empty", torch.zeros(0, 4)),
        ("param", torch.nn.Parameter(torch.ones(3))),
        ("view", torch.arange(16.0).reshape(4, 4)[1:, ::2]),
    ]
    received = deserialize_named_tensors(serialize_named_tensors(sent))
    assert [name for name, _ in received] == [name for name, _ in sent]
    for (_, a), (_, b) in zip(sent, received, strict=True):
        assert (b.dtype, b.shape) == (a.dtype, a.shape)
        assert torch.equal(a.detach(), b)


def test_torch_own_shared_memory_form_is_read_into_memory_the_engine_owns() -> None:
    """What SGLang's MultiprocessingSerializer writes for a CPU tensor (a shared-memory
    handle), read where the sender's auth key is known (here: the same process)."""
    sender = torch.arange(4.0)
    buffer = io.BytesIO()
    ForkingPickler(buffer).dump([("w", sender)])
    [(name, received)] = deserialize_named_tensors(base64.b64encode(buffer.getvalue()).decode())
    sender.add_(100.0)  # an optimizer step after the hand-over
    assert name == "w" and torch.equal(received, torch.arange(4.0))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (pickle.dumps({"w": 1}), "expected a list of (name, tensor)"),
        (pickle.dumps([("w", 1.0)]), "every entry must be a (name, tensor) pair"),
        (pickle.dumps([("w", eval)]), "refused global builtins.eval"),
        (b"not a pickle", "cannot read serialized_named_tensors"),
    ],
    ids=["dict", "not-a-tensor", "builtin", "garbage"],
)
def test_anything_but_named_tensors_is_refused(payload: bytes, reason: str) -> None:
    with pytest.raises(WeightLoadError, match=re.escape(reason)):
        deserialize_named_tensors(base64.b64encode(payload).decode())
