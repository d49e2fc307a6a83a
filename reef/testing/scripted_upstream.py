"""A scripted stand-in for a paid LLM provider that speaks both the OpenAI and Anthropic dialects.

A raw ASGI app (no framework, orjson) so it is cheap enough to sit behind benchmarks::

    python -m reef.testing.scripted_upstream --port 0
    # ready http://127.0.0.1:43817

or, in-process, ``make_app()`` for any ASGI server.

Routes: ``POST /v1/chat/completions``, ``/v1/messages``, ``/v1/messages/count_tokens``,
``/v1/responses`` (buffered, or SSE with ``"stream": true``) and ``GET /v1/models``.

Answers are deterministic. If the last user message contains ``Return exactly: X`` the
answer is ``X``; otherwise it is ``ok: <the message>``. Fault markers anywhere in that
message script the exchange (they are removed from the text before answering):

``__status_<code>__``  answer with that HTTP status and the dialect's error body
                       (``__status_500__``, ``__status_429__``, ...)
``__sleep_<seconds>__``  wait that long before the first byte (for upstream timeouts)
``__break_stream__``   streams send a few deltas, then the connection is closed with no
                       terminator; buffered answers send half the body, then close

``Call tool NAME with {...}`` scripts a tool call in every dialect (buffered and streamed):
answered with that call until the request carries its result, then with the prompt's
text (:mod:`reef.testing.scripted_tools`).

``GET /_stub/requests[?contains=TEXT&limit=N]`` returns the recent requests (method, path,
query, headers, body), oldest first, so a test can check exactly what reached the
provider; ``DELETE /_stub/requests`` forgets them.

Sockets are uvicorn's (uvloop + httptools when installed), which set ``TCP_NODELAY`` on
every accepted connection, so small SSE frames are not held back by Nagle's algorithm.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import re
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs

import orjson

from reef.testing import scripted_tools
from reef.testing.scripted_tools import ToolCall

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MODEL: Final = "stub-model"
_STATUS = re.compile(r"__status_(\d{3})__")
_SLEEP = re.compile(r"__sleep_(\d+(?:\.\d+)?)__")
_BREAK = "__break_stream__"
_RETURN_EXACTLY = re.compile(r"Return exactly:\s*(.*)", re.S)
_JSON: Final = [(b"content-type", b"application/json")]
_SSE: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


# ---------------------------------------------------------------------------
# The script a prompt carries


@dataclass(frozen=True, slots=True)
class Script:
    """What the last user message asks of the stand-in."""

    text: str
    status: int | None = None
    sleep: float = 0.0
    break_stream: bool = False
    calls: tuple[ToolCall, ...] = ()
    results: int = 0  # tool results the request carries after the prompt

    @classmethod
    def parse(cls, prompt: str, *, results: int = 0) -> Script:
        status = _STATUS.search(prompt)
        sleep = _SLEEP.search(prompt)
        rest, calls = scripted_tools.split_calls(prompt)
        text = " ".join(_SLEEP.sub("", _STATUS.sub("", rest.replace(_BREAK, ""))).split())
        return cls(
            text=text,
            status=int(status.group(1)) if status else None,
            sleep=float(sleep.group(1)) if sleep else 0.0,
            break_stream=_BREAK in prompt,
            calls=calls,
            results=results,
        )

    @property
    def call(self) -> ToolCall | None:
        """The tool call to answer with: the first whose result the request lacks."""
        return self.calls[self.results] if self.results < len(self.calls) else None

    @property
    def answer(self) -> str:
        match = _RETURN_EXACTLY.search(self.text)
        return match.group(1).strip() if match else f"ok: {self.text}"

    @property
    def input_tokens(self) -> int:
        return max(1, len(self.text.split()))

    @property
    def output_tokens(self) -> int:
        said = self.call.arguments if self.call else self.answer
        return max(1, len(said.split()))

    def pieces(self) -> list[str]:
        """The answer as stream deltas (word by word, spaces kept), or the call's arguments."""
        if self.call is not None:
            return self.call.pieces()
        return re.findall(r"\S+\s*", self.answer) or [self.answer]


def _text_of(content: Any) -> str:
    """Text of a message's content: a string, or a list of text / input_text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def last_user_text(messages: Any) -> str:
    """The last ``role: user`` message of a chat / messages / responses ``input`` list."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return ""
    for item in reversed(messages):
        if isinstance(item, dict) and item.get("role", "user") == "user":
            return _text_of(item.get("content"))
    return ""


# ---------------------------------------------------------------------------
# Wire helpers


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def send_json(
    send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_JSON, (b"content-length", str(len(body)).encode()), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_broken_json(send: Send, payload: Any) -> None:
    """Announce the whole body, send half of it, then let the server drop the connection."""
    body = orjson.dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*_JSON, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    payload = data if isinstance(data, bytes) else orjson.dumps(data)
    return head + b"data: " + payload + b"\n\n"


async def send_stream(send: Send, frames: Iterator[bytes], *, break_after: int | None) -> None:
    """Send SSE frames; with ``break_after`` stop there and return without completing."""
    await send({"type": "http.response.start", "status": 200, "headers": list(_SSE)})
    for index, frame in enumerate(frames):
        if break_after is not None and index >= break_after:
            return  # uvicorn closes the connection: no terminator, no final chunk
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def openai_error(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_exceeded",
    }.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


# ---------------------------------------------------------------------------
# Dialects


@dataclass(frozen=True, slots=True)
class Exchange:
    """One parsed provider request."""

    number: int
    body: dict[str, Any]
    script: Script

    @property
    def model(self) -> str:
        return str(self.body.get("model") or MODEL)

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


def _break_point(exchange: Exchange, head: int) -> int | None:
    """Frame index to stop at: after the head frames and about half the deltas."""
    if not exchange.script.break_stream:
        return None
    return head + max(1, len(exchange.script.pieces()) // 2)


def chat_completion(exchange: Exchange) -> dict[str, Any]:
    script = exchange.script
    message: dict[str, Any] = {"role": "assistant", "content": script.answer, "refusal": None}
    if script.call is not None:
        message = scripted_tools.chat_message(script.call, exchange.number)
    return {
        "id": f"chatcmpl-stub-{exchange.number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": exchange.model,
        "system_fingerprint": "fp_stub",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "stop" if script.call is None else "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": script.input_tokens,
            "completion_tokens": script.output_tokens,
            "total_tokens": script.input_tokens + script.output_tokens,
        },
    }


def chat_chunks(exchange: Exchange) -> list[bytes]:
    script = exchange.script
    options = exchange.body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    base = {
        "id": f"chatcmpl-stub-{exchange.number}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": exchange.model,
        "system_fingerprint": "fp_stub",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage:
            body["usage"] = None
        return sse(body)

    if script.call is None:
        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"content": piece}) for piece in script.pieces()]
        frames.append(chunk({}, "stop"))
    else:
        frames = [chunk(d) for d in scripted_tools.chat_deltas(script.call, exchange.number)]
        frames.append(chunk({}, "tool_calls"))
    if usage:
        frames.append(
            sse(
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": script.input_tokens,
                        "completion_tokens": script.output_tokens,
                        "total_tokens": script.input_tokens + script.output_tokens,
                    },
                }
            )
        )
    frames.append(sse(b"[DONE]"))
    return frames


def anthropic_message(exchange: Exchange, *, streaming: bool = False) -> dict[str, Any]:
    script = exchange.script
    block = {"type": "text", "text": script.answer}
    if script.call is not None:
        block = scripted_tools.anthropic_block(script.call, exchange.number)
    return {
        "id": f"msg_stub_{exchange.number}",
        "type": "message",
        "role": "assistant",
        "model": exchange.model,
        "content": [] if streaming else [block],
        "stop_reason": None if streaming else _anthropic_stop(script),
        "stop_sequence": None,
        "usage": {
            "input_tokens": script.input_tokens,
            "output_tokens": 1 if streaming else script.output_tokens,
        },
    }


def _anthropic_stop(script: Script) -> str:
    return "end_turn" if script.call is None else "tool_use"


def anthropic_events(exchange: Exchange) -> list[bytes]:
    script = exchange.script
    block: dict[str, Any] = {"type": "text", "text": ""}
    deltas = [{"type": "text_delta", "text": piece} for piece in script.pieces()]
    if script.call is not None:
        block = scripted_tools.anthropic_block(script.call, exchange.number, streaming=True)
        deltas = scripted_tools.anthropic_deltas(script.call)
    frames = [
        sse(
            {"type": "message_start", "message": anthropic_message(exchange, streaming=True)},
            "message_start",
        ),
        sse(
            {"type": "content_block_start", "index": 0, "content_block": block},
            "content_block_start",
        ),
        sse({"type": "ping"}, "ping"),
    ]
    frames += [
        sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
        for delta in deltas
    ]
    frames += [
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _anthropic_stop(script), "stop_sequence": None},
                "usage": {"output_tokens": script.output_tokens},
            },
            "message_delta",
        ),
        sse({"type": "message_stop"}, "message_stop"),
    ]
    return frames


def response_object(exchange: Exchange, *, done: bool = True) -> dict[str, Any]:
    script = exchange.script
    return {
        "id": f"resp_stub_{exchange.number}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if done else "in_progress",
        "model": exchange.model,
        "output": [response_item(exchange)] if done else [],
        "usage": {
            "input_tokens": script.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": script.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": script.input_tokens + script.output_tokens,
        }
        if done
        else None,
        "error": None,
        "incomplete_details": None,
        "instructions": exchange.body.get("instructions"),
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
    }


def response_item(exchange: Exchange, *, text: str | None = None) -> dict[str, Any]:
    done = text is None
    if exchange.script.call is not None:
        return scripted_tools.response_item(exchange.script.call, exchange.number, done=done)
    return {
        "type": "message",
        "id": f"msg_stub_{exchange.number}",
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": [
            {
                "type": "output_text",
                "text": exchange.script.answer,
                "annotations": [],
                "logprobs": [],
            }
        ]
        if done
        else [],
    }


def response_events(exchange: Exchange) -> list[bytes]:
    item_id = f"msg_stub_{exchange.number}"
    answer = exchange.script.answer
    part = {"type": "output_text", "text": answer, "annotations": [], "logprobs": []}
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_object(exchange, done=False)},
        {"type": "response.in_progress", "response": response_object(exchange, done=False)},
    ]
    call = exchange.script.call
    if call is not None:
        events += scripted_tools.response_events(call, exchange.number)
    else:
        events += [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": response_item(exchange, text=""),
            },
            {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
        ]
        events += [
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in exchange.script.pieces()
        ]
        events += [
            {"type": "response.output_text.done", **where, "text": answer, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": part},
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": response_item(exchange),
            },
        ]
    events.append({"type": "response.completed", "response": response_object(exchange)})
    return [
        sse({**event, "sequence_number": number}, event["type"])
        for number, event in enumerate(events)
    ]


MODELS: Final = {
    "object": "list",
    "data": [
        {
            "id": MODEL,
            "object": "model",
            "created": 1_700_000_000,
            "owned_by": "reef-tests",
            "type": "model",
            "display_name": "Scripted stand-in",
            "created_at": "2024-01-01T00:00:00Z",
        }
    ],
    "has_more": False,
    "first_id": MODEL,
    "last_id": MODEL,
}


# ---------------------------------------------------------------------------
# The app


@dataclass(frozen=True, slots=True)
class Route:
    dialect: str  # which error shape: "openai" or "anthropic"
    conversation: Callable[[dict[str, Any]], Any]  # the body's messages / input
    buffered: Callable[[Exchange], Any]
    frames: Callable[[Exchange], list[bytes]] | None
    head_frames: int = 1  # frames before the first delta (where a break may start)

    def prompt(self, body: dict[str, Any]) -> str:
        return last_user_text(self.conversation(body))


def _messages(body: dict[str, Any]) -> Any:
    return body.get("messages")


def _input(body: dict[str, Any]) -> Any:
    return body.get("input")


ROUTES: Final[dict[str, Route]] = {
    "/v1/chat/completions": Route("openai", _messages, chat_completion, chat_chunks, 1),
    "/v1/messages": Route("anthropic", _messages, anthropic_message, anthropic_events, 3),
    "/v1/messages/count_tokens": Route(
        "anthropic", _messages, lambda e: {"input_tokens": e.script.input_tokens}, None
    ),
    "/v1/responses": Route("openai", _input, response_object, response_events, 4),
}


class ScriptedUpstream:
    """The ASGI app; keeps the most recent requests for ``GET /_stub/requests``."""

    def __init__(self, *, history: int = 2000) -> None:
        self.recent: deque[tuple[str, str, bytes, list[tuple[bytes, bytes]], bytes]] = deque(
            maxlen=history
        )
        self._numbers = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        method, path = scope["method"], scope["path"]
        if path.startswith("/_stub/"):
            await self._stub(method, path, scope.get("query_string", b""), send)
            return
        self.recent.append((method, path, scope.get("query_string", b""), scope["headers"], body))
        if method == "GET" and path == "/v1/models":
            await send_json(send, 200, MODELS)
            return
        route = ROUTES.get(path)
        if route is None or method != "POST":
            await send_json(send, 404, openai_error(404, f"no route {method} {path}"))
            return
        await self._answer(route, body, send)

    def script(self, route: Route, body: dict[str, Any]) -> Script:
        """What a request asks of the stand-in: its prompt's script, or the tool turn its
        last prompt directs; a request offering no tools (an agent's side call) is
        answered with text (a subclass may answer otherwise)."""
        offered = bool(body.get("tools"))
        prompt, results = scripted_tools.tool_turn(route.conversation(body))
        if offered and scripted_tools.has_directive(prompt):
            return Script.parse(prompt, results=results)
        script = Script.parse(route.prompt(body))
        return script if offered else dataclasses.replace(script, calls=())

    async def _answer(self, route: Route, raw: bytes, send: Send) -> None:
        error = anthropic_error if route.dialect == "anthropic" else openai_error
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await send_json(send, 400, error(400, "request body is not valid JSON"))
            return
        if not isinstance(body, dict):
            await send_json(send, 400, error(400, "request body must be a JSON object"))
            return
        exchange = Exchange(next(self._numbers), body, self.script(route, body))
        script = exchange.script
        if script.sleep:
            await asyncio.sleep(script.sleep)
        if script.status is not None and script.status >= 400:
            headers = [(b"retry-after", b"0")] if script.status == 429 else []
            await send_json(send, script.status, error(script.status, "scripted failure"), headers)
            return
        if exchange.stream and route.frames is not None:
            frames = route.frames(exchange)
            stop = _break_point(exchange, route.head_frames)
            await send_stream(send, iter(frames), break_after=stop)
        elif script.break_stream:
            await send_broken_json(send, route.buffered(exchange))
        else:
            await send_json(send, 200, route.buffered(exchange))

    async def _stub(self, method: str, path: str, query: bytes, send: Send) -> None:
        if path != "/_stub/requests":
            await send_json(send, 404, {"error": {"code": "not_found", "message": path}})
        elif method == "DELETE":
            self.recent.clear()
            await send_json(send, 200, {"cleared": True})
        else:
            params = parse_qs(query.decode("latin-1"))
            contains = params.get("contains", [None])[0]
            limit = int(params.get("limit", ["200"])[0])
            found = [r for r in map(_describe, self.recent) if _matches(r, contains)]
            await send_json(send, 200, {"requests": found[-limit:]})


def _describe(entry: tuple[str, str, bytes, list[tuple[bytes, bytes]], bytes]) -> dict[str, Any]:
    method, path, query, headers, body = entry
    text = body.decode("utf-8", errors="replace")
    try:
        parsed: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = text
    return {
        "method": method,
        "path": path,
        "query": query.decode("latin-1"),
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers],
        "body": parsed,
        "raw": text,
    }


def _matches(request: dict[str, Any], contains: str | None) -> bool:
    if contains is None:
        return True
    return contains in request["raw"] or any(contains in v for _, v in request["headers"])


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def make_app(*, history: int = 2000) -> ScriptedUpstream:
    """A fresh app (its own request history)."""
    return ScriptedUpstream(history=history)


# ---------------------------------------------------------------------------
# Command line


async def _serve(server: Any) -> None:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # start-up failed: raise its error
            raise SystemExit("the scripted upstream did not start")
        await asyncio.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    print(f"ready http://{host}:{port}", flush=True)
    await task


def run_stand_in(app: Any, argv: list[str] | None, description: str, **options: Any) -> None:
    """A stand-in's command line (``--host``, ``--port``: 0 picks a free one,
    ``--log-level``): serve ``app`` until stopped, then exit 0. ``options`` go to uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        lifespan="on",
        access_log=False,
        log_level=args.log_level,
        **options,
    )
    server = uvicorn.Server(config)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(_serve(server))
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    run_stand_in(make_app(), argv, __doc__.splitlines()[0], backlog=4096, timeout_keep_alive=60)


if __name__ == "__main__":
    main()
