"""The slime data source, with a duck-typed stand-in for slime's Sample (slime never ran)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from recipes.base import Batch
from recipes.errors import TrainingError
from recipes.samples import Sample, Turn
from trainers.backends.slime_source import ReefRolloutSource, generate_rollout, slime_sample_class


@dataclass
class StandInSample:
    """The fields of ``slime.utils.types.Sample`` the adapter fills."""

    group_index: int | None = None
    index: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def sample(name: str, score: float, output: list[int] | None) -> Sample:
    response: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    if output is not None:
        response["meta_info"] = {
            "input_ids": [1, 5, 9],
            "output_ids": output,
            "output_token_logprobs": [[-0.5, t, None] for t in output],
        }
    turn = Turn(
        "r",
        "rel-1",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "q"}]},
        response,
    )
    return Sample(name, "sc", "rep", score, {"correction": "ok"}, {"g": "1"}, (turn,), ("rel-1",))


def test_reef_groups_become_slime_groups_token_for_token() -> None:
    source = ReefRolloutSource(StandInSample)
    batch = Batch("sc", ((sample("a", 1.0, [7, 8, 2]), sample("b", 0.0, [6, 2])),))
    source.put(batch)
    assert source.pending() == 1
    (group,) = generate_rollout(SimpleNamespace(rollout_batch_size=1), 0, source)
    first, second = group
    assert first.tokens == [1, 5, 9, 7, 8, 2] and first.response_length == 3
    assert first.loss_mask == [1, 1, 1] and first.rollout_log_probs == [-0.5] * 3
    assert first.reward == 1.0 and second.reward == 0.0
    assert first.weight_versions == ["rel-1"] and first.label == "ok"
    assert first.prompt == [{"role": "user", "content": "q"}] and first.response == "ok"
    assert first.metadata["reef_sample_id"] == "a" and (second.group_index, second.index) == (0, 1)


def test_samples_without_token_data_are_refused() -> None:
    source = ReefRolloutSource(StandInSample)
    with pytest.raises(TrainingError, match="no recorded token"):
        source.put(Batch("sc", ((sample("a", 1.0, None),),)))


def test_without_slime_installed_the_error_says_so() -> None:
    try:
        import slime  # noqa: F401
    except ImportError:
        with pytest.raises(TrainingError, match="needs slime installed"):
            slime_sample_class()
    else:  # a machine with slime: the real Sample class is found instead
        assert slime_sample_class() is not None
