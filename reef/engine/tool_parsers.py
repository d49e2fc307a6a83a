"""Tool-call parsers: a model family's call syntax → text and calls, chosen by name.

As SGLang's ``--tool-call-parser``, one parser per model family:

- ``qwen25`` / ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one block per call; text outside the blocks is the answer's text.
- ``llama3``: JSON ``{"name": ..., "parameters": {...}}`` (or ``"arguments"``), the whole
  output, optionally after ``<|python_tag|>``; several calls separated by ``;``.
- ``pythonic``: ``[name(key="value", n=1), other(flag=true)]`` (Llama 3.2/4's pythonic
  form; the built-in tiny model's syntax, which its character vocabulary can spell).
  Literals are Python's or JSON's (``True``/``true``, ``None``/``null``).

**All or nothing.** Parsing never fails a request: an output whose call syntax does not
parse, or that calls a tool the request did not offer, is returned whole as text (inside
this module such an output raises ``ValueError``, caught by each parser's ``parse``).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from reef.engine.errors import EngineError


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A call found in the output: ``arguments`` is the JSON text of an object."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Parsed:
    """An output split into its text and its calls (no calls: all of it is text)."""

    text: str
    calls: tuple[ParsedCall, ...] = ()


class ToolCallParser(Protocol):
    """One model family's call syntax."""

    def parse(self, text: str, tools: frozenset[str]) -> Parsed:
        """``text`` split into text and calls to ``tools``; all text when it does not parse."""
        ...

    def held_from(self, text: str) -> int:
        """Where a call may begin in a partial output: streamed text stops there."""
        ...


def _call(name: Any, arguments: Any, tools: frozenset[str]) -> ParsedCall:
    if not isinstance(name, str) or name not in tools:
        raise ValueError(f"no offered tool {name!r}")
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise ValueError("arguments are not JSON") from exc
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ValueError("arguments are not an object")
    try:
        return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))
    except (TypeError, ValueError) as exc:  # a set, bytes or a tuple key: not JSON
        raise ValueError("arguments are not JSON values") from exc


def _json_call(found: Any, tools: frozenset[str]) -> ParsedCall:
    if not isinstance(found, dict):
        raise ValueError("a call is not an object")
    arguments = found.get("arguments", found.get("parameters"))
    return _call(found.get("name"), arguments, tools)


def _held(text: str, openers: tuple[str, ...]) -> int:
    """The first opener's index, or the start of a tail that could still become one."""
    found = [text.find(o) for o in openers if o in text]
    if found:
        return min(found)
    for start in range(max(0, len(text) - max(map(len, openers)) + 1), len(text)):
        if any(o.startswith(text[start:]) for o in openers):
            return start
    return len(text)


class HermesParser:
    """``<tool_call>{json}</tool_call>`` blocks (Qwen 2.5, Hermes); the last block's
    closing tag may be missing (the model stopped at eos right after the JSON)."""

    OPEN: Final = "<tool_call>"
    CLOSE: Final = "</tool_call>"

    def parse(self, text: str, tools: frozenset[str]) -> Parsed:
        if self.OPEN not in text or not tools:
            return Parsed(text)
        try:
            return self._parse(text, tools)
        except ValueError:
            return Parsed(text)

    def _parse(self, text: str, tools: frozenset[str]) -> Parsed:
        head, *blocks = text.split(self.OPEN)
        outside, calls = [head], []
        for index, block in enumerate(blocks):
            body, closed, rest = block.partition(self.CLOSE)
            calls.append(_json_call(json.loads(body), tools))
            if not closed and index < len(blocks) - 1:
                raise ValueError("an unclosed call before another")
            outside.append(rest)
        return Parsed("".join(outside).strip(), tuple(calls))

    def held_from(self, text: str) -> int:
        return _held(text, (self.OPEN,))


class Llama3Parser:
    """JSON calls as the whole output, after an optional ``<|python_tag|>``."""

    TAG: Final = "<|python_tag|>"

    def parse(self, text: str, tools: frozenset[str]) -> Parsed:
        head, tagged, body = text.partition(self.TAG)
        if not tagged:
            head, body = "", text
        if not tools or not body.lstrip().startswith("{"):
            return Parsed(text)
        try:
            calls = tuple(_json_call(found, tools) for found in _json_objects(body))
        except ValueError:
            return Parsed(text)
        return Parsed(head.strip(), calls)

    def held_from(self, text: str) -> int:
        if not text.strip() or text.lstrip().startswith("{"):
            return 0  # the output may still open as a JSON call
        return _held(text, (self.TAG,))


def _json_objects(body: str) -> Iterator[Any]:
    """The JSON values of ``a; b; c`` (separators ``;`` and white space), all of it."""
    decoder = json.JSONDecoder()
    position, end = 0, len(body)
    while True:
        while position < end and (body[position].isspace() or body[position] == ";"):
            position += 1
        if position == end:
            return
        found, position = decoder.raw_decode(body, position)
        yield found


_PYTHONIC_START: Final = re.compile(r"\[\s*[A-Za-z_][\w.-]*\s*\(")
_NAMED_LITERALS: Final[Mapping[str, Any]] = {
    "true": True,
    "false": False,
    "null": None,
    "none": None,
    "True": True,
    "False": False,
    "None": None,
}


class PythonicParser:
    """``[name(key=value, ...), ...]``; text before the list (and after it) is text."""

    def parse(self, text: str, tools: frozenset[str]) -> Parsed:
        start = _PYTHONIC_START.search(text)
        if start is None or not tools:
            return Parsed(text)
        for end in _closing_brackets(text, start.start()):
            try:
                tree = ast.parse(text[start.start() : end + 1].strip(), mode="eval")
            except (SyntaxError, ValueError, RecursionError):
                continue  # not the list's end yet (or never parseable)
            try:
                calls = _pythonic_calls(tree.body, tools)
            except (ValueError, RecursionError):
                return Parsed(text)
            rest = (text[: start.start()] + text[end + 1 :]).strip()
            return Parsed(rest, calls)
        return Parsed(text)

    def held_from(self, text: str) -> int:
        return _held(text, ("[",))


def _closing_brackets(text: str, start: int) -> Iterator[int]:
    position = text.find("]", start)
    while position != -1:
        yield position
        position = text.find("]", position + 1)


def _pythonic_calls(node: ast.expr, tools: frozenset[str]) -> tuple[ParsedCall, ...]:
    if not isinstance(node, ast.List) or not node.elts:
        raise ValueError("not a list of calls")
    calls = []
    for element in node.elts:
        if not isinstance(element, ast.Call) or element.args:
            raise ValueError("a call needs keyword arguments only")
        name = _dotted(element.func)
        if any(k.arg is None for k in element.keywords):
            raise ValueError("**kwargs in a call")
        arguments = {str(k.arg): _literal(k.value) for k in element.keywords}
        calls.append(_call(name, arguments, tools))
    return tuple(calls)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise ValueError("a call's name is not a name")


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _NAMED_LITERALS:
        return _NAMED_LITERALS[node.id]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {
            _literal(k) if k else None: _literal(v)
            for k, v in zip(node.keys, node.values, strict=True)
        }
    try:
        return ast.literal_eval(node)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise ValueError("an argument is not a literal") from exc


#: ``--tool-call-parser`` names
PARSERS: Final[Mapping[str, ToolCallParser]] = {
    "qwen25": HermesParser(),
    "hermes": HermesParser(),
    "llama3": Llama3Parser(),
    "pythonic": PythonicParser(),
}
#: the parser a built-in model speaks when none is named
BUILTIN_PARSERS: Final[Mapping[str, str]] = {"tiny": "pythonic", "tiny-100m": "pythonic"}


def parser_for(name: str | None, model: str) -> ToolCallParser | None:
    """The parser ``name`` selects; unnamed: the built-in model's own, else none."""
    chosen = name or BUILTIN_PARSERS.get(model)
    if chosen is None:
        return None
    if chosen not in PARSERS:
        known = ", ".join(sorted(PARSERS))
        raise EngineError(f"unknown tool-call parser {chosen!r}; known: {known}")
    return PARSERS[chosen]
