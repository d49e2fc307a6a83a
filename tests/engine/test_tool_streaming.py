"""How a streamed output is split: text is shown as it comes until a call may begin, the
calls are read once the output is complete, every step is sent exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator

from reef.engine.config import EngineConfig
from reef.engine.generation import Completion, Sampling, Step
from reef.engine.model import EngineModel
from reef.engine.runtime import EngineRuntime
from reef.engine.tool_parsers import PythonicParser
from reef.engine.turns import LastPiece, TextPiece, ToolUse, Turn, pieces
from reef.modelkit.tiny import build_model, build_tokenizer

GREEDY = Sampling(temperature=0.0)


def _runtime() -> EngineRuntime:
    model = EngineModel(build_model(), build_tokenizer(), model_path="tiny", weight_version="0")
    return EngineRuntime(model, EngineConfig())


async def _split(
    runtime: EngineRuntime, output: str, tools: frozenset[str], sampling: Sampling = GREEDY
) -> list[TextPiece | LastPiece]:
    ids = runtime.tokenizer.encode(output, add_special_tokens=False)
    steps = [Step(token, -0.5) for token in ids]
    done = Completion(prompt_ids=[1], steps=steps, finish_type="stop")

    async def events() -> AsyncIterator[tuple[str, Step | Completion]]:
        for step in steps[1:]:
            yield "v", step
        yield "v", done

    turn = Turn(prompt_ids=[1], tool_use=ToolUse(PythonicParser(), tools))
    return [piece async for piece in pieces(runtime, sampling, turn, steps[0], events())]


async def test_text_before_a_call_streams_and_the_call_comes_at_the_end() -> None:
    runtime = _runtime()
    output = 'ok, one moment. [get_time(zone="utc")]'
    split = await _split(runtime, output, frozenset({"get_time"}))
    *texts, last = split
    assert all(isinstance(piece, TextPiece) for piece in texts)
    assert "".join(piece.text for piece in texts) == "ok, one moment. "
    assert isinstance(last, LastPiece)
    assert [(c.name, c.arguments) for c in last.answer.calls] == [("get_time", '{"zone": "utc"}')]
    assert last.text == ""
    sent = sum(len(piece.steps) for piece in split)
    assert sent == len(output)  # each token's step in exactly one piece


async def test_a_bracket_that_opens_no_call_is_shown_at_the_end() -> None:
    runtime = _runtime()
    output = "see [1, 2] there"
    split = await _split(runtime, output, frozenset({"get_time"}))
    last = split[-1]
    assert isinstance(last, LastPiece) and last.answer.calls == ()
    assert "".join(piece.text for piece in split) == output
    assert sum(len(piece.steps) for piece in split) == len(output)


async def test_without_tools_nothing_is_held_back() -> None:
    runtime = _runtime()
    output = '[get_time(zone="utc")]'
    split = await _split(runtime, output, frozenset())
    assert [piece.text for piece in split[:-1]] == list(output)
    assert isinstance(split[-1], LastPiece) and split[-1].text == ""
