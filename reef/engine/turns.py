"""What the three API dialects share: a conversation's prompt, its tool choice, and the
answer split into text and calls (buffered, or as pieces while it streams).

Every route reads its request into :class:`reef.core.dialogue.model.Conversation`
(:func:`reef.core.dialogue.records.conversation_of`), renders it with the model's chat
template and the offered tools, generates, and writes the :class:`Answer` back in its
own dialect.

**Tool choice.** ``none`` renders no tools and parses no calls. ``auto``, ``required``
and a named tool render the tools and parse the output with the engine's tool-call
parser; a named choice accepts calls to that tool only. Decoding is not constrained:
under ``required`` or a named tool a model that writes no call answers with text.
Without a parallel-call permission only the first call is kept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import Request
from jinja2 import TemplateError

from reef.core.dialogue.chat_template import template_messages, template_tools
from reef.core.dialogue.model import Conversation
from reef.core.routing import LOGPROBS_HEADER
from reef.engine.errors import EngineError
from reef.engine.generation import Completion, Sampling, Step
from reef.engine.runtime import EngineRuntime
from reef.engine.sampling_defaults import SamplingDefaults
from reef.engine.shaping import visible_text
from reef.engine.tool_parsers import Parsed, ParsedCall, ToolCallParser, parser_for

Mode = Literal["auto", "none", "required", "named"]
#: the most top logprobs per token an answer's token record carries (OpenAI's limit)
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """A request's tool choice, whatever its dialect called it."""

    mode: Mode = "auto"
    name: str | None = None
    parallel: bool = True


def tool_choice_of(params: Mapping[str, Any], dialect: str) -> ToolChoice:
    """``tool_choice`` (and the parallel-call switch) of a chat, Anthropic or Responses body."""
    raw = params.get("tool_choice")
    if dialect == "anthropic":
        return _anthropic_choice(raw)
    parallel = params.get("parallel_tool_calls") is not False
    if raw is None or raw in ("auto", "none", "required"):
        return ToolChoice(raw or "auto", None, parallel)
    if isinstance(raw, dict):
        inner = raw.get("function") if isinstance(raw.get("function"), dict) else raw
        name = inner.get("name") if isinstance(inner, dict) else None
        if isinstance(name, str) and name:
            return ToolChoice("named", name, parallel)
    raise EngineError(f"tool_choice {raw!r} is not auto, none, required or a named function")


def _anthropic_choice(raw: Any) -> ToolChoice:
    if raw is None:
        return ToolChoice()
    if not isinstance(raw, dict):
        raise EngineError("tool_choice must be an object with a type")
    parallel = raw.get("disable_parallel_tool_use") is not True
    kind = raw.get("type")
    if kind in ("auto", "none"):
        return ToolChoice(kind, None, parallel)
    if kind == "any":
        return ToolChoice("required", None, parallel)
    if kind == "tool" and isinstance(raw.get("name"), str):
        return ToolChoice("named", raw["name"], parallel)
    raise EngineError(f"tool_choice {raw!r} is not auto, any, none or a named tool")


@dataclass(frozen=True, slots=True)
class ToolUse:
    """How one request's output is read: the parser, and the tools it may call."""

    parser: ToolCallParser | None
    tools: frozenset[str] = field(default_factory=frozenset)
    parallel: bool = True

    def parse(self, text: str) -> Parsed:
        if self.parser is None or not self.tools:
            return Parsed(text)
        parsed = self.parser.parse(text, self.tools)
        if not self.parallel and len(parsed.calls) > 1:
            return Parsed(parsed.text, parsed.calls[:1])
        return parsed

    def held_from(self, text: str) -> int:
        if self.parser is None or not self.tools:
            return len(text)
        return self.parser.held_from(text)


@dataclass(frozen=True, slots=True)
class Turn:
    """A request ready to generate: prompt token ids and how to read the output."""

    prompt_ids: list[int]
    tool_use: ToolUse


def turn_of(conversation: Conversation, runtime: EngineRuntime, dialect: str) -> Turn:
    """The conversation rendered with the chat template (tools unless ``none``)."""
    choice = tool_choice_of(conversation.params, dialect)
    offered = () if choice.mode == "none" else conversation.tools
    names = frozenset(t.name for t in offered if t.kind != "raw")
    if choice.mode == "named":
        if choice.name not in names:
            raise EngineError(f"tool_choice names {choice.name!r}, which is not in tools")
        names = frozenset({choice.name})
    config = runtime.config
    parser = parser_for(config.tool_call_parser, config.model)
    return Turn(
        prompt_ids=prompt_ids(runtime, conversation, with_tools=bool(offered)),
        tool_use=ToolUse(parser, names, choice.parallel),
    )


def prompt_ids(
    runtime: EngineRuntime, conversation: Conversation, *, with_tools: bool
) -> list[int]:
    tokenizer = runtime.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise EngineError("the model's tokenizer has no chat template")
    messages = template_messages(conversation.flat())
    if not messages:
        raise EngineError("the conversation has no messages")
    tools = template_tools(conversation.tools) if with_tools else []
    try:
        encoded = tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=True
        )
    except (TemplateError, ValueError) as exc:  # a template's raise_exception, or bad input
        raise EngineError(f"the chat template cannot render this conversation: {exc}") from exc
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    return [int(token) for token in encoded]


def adapter_named(model: str, lora_path: str | None, runtime: EngineRuntime) -> str | None:
    """The adapter a request names, as SGLang reads it (``model`` before ``lora_path``)."""
    _, colon, named = model.partition(":")
    if colon and named.strip():
        return named.strip()
    if lora_path:
        return lora_path
    if model and model in runtime.model.snapshot().adapters:
        return model
    return None


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (a 400 in the route's dialect otherwise)."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise EngineError("the body is not JSON") from exc
    if not isinstance(body, dict):
        raise EngineError("the body is not a JSON object")
    return body


def number(body: Mapping[str, Any], key: str) -> float | None:
    """A numeric field of a request body; None when it is absent or null (a 400 when it
    is not a number)."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EngineError(f"{key} must be a number")
    return float(value)


def body_sampling(
    body: Mapping[str, Any],
    defaults: SamplingDefaults,
    *,
    max_new_tokens: int,
    stop: tuple[str, ...] = (),
) -> Sampling:
    """A JSON body's ``temperature``, ``top_p`` and ``top_k`` (Anthropic's; on Responses
    ``top_k`` is SGLang's extension) as :class:`Sampling`; what the body omits comes from
    ``defaults`` (the model's, then the API's)."""
    top_k = number(body, "top_k")
    return Sampling(
        max_new_tokens=max_new_tokens,
        temperature=defaults.temperature_for(number(body, "temperature")),
        top_p=defaults.top_p_for(number(body, "top_p")),
        top_k=defaults.top_k_for(None if top_k is None else int(top_k)),
        stop=stop,
    )


def token_record(body: Mapping[str, Any], headers: Mapping[str, str]) -> int | None:
    """How many top logprobs per token the answer's token record (``meta_info``) carries;
    None: no record asked for. Reef's API asks with ``x-reef-logprobs: K``; a client
    with Reef's ``"logprobs": true`` gets the record without top logprobs."""
    asked = headers.get(LOGPROBS_HEADER)
    if asked is None:
        return 0 if body.get("logprobs") is True else None
    if not asked.strip().isdigit() or int(asked) > MAX_TOP_LOGPROBS:
        raise EngineError(f"{LOGPROBS_HEADER} must be an integer from 0 to {MAX_TOP_LOGPROBS}")
    return int(asked)


def token_limit(body: Mapping[str, Any], key: str, default: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineError(f"{key} must be a positive integer")
    return value


# -- the answer, buffered or in pieces ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """The whole output read: text, calls, and the completion it came from."""

    completion: Completion
    text: str
    calls: tuple[ParsedCall, ...]


def answer_of(runtime: EngineRuntime, sampling: Sampling, turn: Turn, done: Completion) -> Answer:
    text = visible_text(runtime.decode(done.output_ids), sampling, done)
    parsed = turn.tool_use.parse(text)
    return Answer(done, parsed.text, parsed.calls)


@dataclass(frozen=True, slots=True)
class TextPiece:
    """Text that may be shown now, with the steps that produced it."""

    text: str
    steps: list[Step]


@dataclass(frozen=True, slots=True)
class LastPiece:
    """The end: text not yet shown, the calls, and the steps not yet sent."""

    answer: Answer
    text: str
    steps: list[Step]


async def pieces(
    runtime: EngineRuntime,
    sampling: Sampling,
    turn: Turn,
    first: Step | Completion,
    events: AsyncIterator[tuple[str, Step | Completion]],
) -> AsyncIterator[TextPiece | LastPiece]:
    """Text as it is generated, held back from where a call may begin (a stop string's
    possible start too); the calls are parsed once the output is complete."""
    ids: list[int] = []
    shown, pending = "", []
    item = first
    while isinstance(item, Step):
        ids.append(item.token_id)
        pending.append(item)
        text = visible_text(runtime.decode(ids), sampling, None)
        text = text[: turn.tool_use.held_from(text)]
        if text.startswith(shown) and len(text) > len(shown):
            yield TextPiece(text[len(shown) :], pending)
            shown, pending = text, []
        item = (await anext(events))[1]
    answer = answer_of(runtime, sampling, turn, item)
    rest = answer.text[len(shown) :] if answer.text.startswith(shown) else ""
    yield LastPiece(answer, rest, pending)
