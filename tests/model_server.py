"""A model server on the loopback interface that speaks OpenAI's chat-completions and
Anthropic's Messages API well enough to test the adapters over real HTTP.

It is a small HTTP/1.1 server on anyio's TCP listener, in the test's own event
loop, on an ephemeral port of 127.0.0.1: every answer is scripted per test
(status, headers, a JSON or raw body, a delay, a connection dropped mid-body or
before any answer) and every request is kept for the test to look at. Each
answer closes its connection, so no state leaks from one request to the next.
"""

from __future__ import annotations

import json
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

import anyio
import attrs
from anyio.abc import ByteStream, Listener, SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.tls import TLSListener

MAX_HEAD_BYTES = 64 * 1024


@attrs.frozen
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None
    """Sent as JSON, unless ``raw`` is given."""
    raw: bytes | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    delay_seconds: float = 0.0
    drop_after_bytes: int | None = None
    """Send the head, announcing the whole body, then this many bytes of it, and hang up."""
    hang_up: bool = False
    """Close the connection without answering at all."""


@attrs.frozen
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


Script = Callable[[Request], Reply]


class ModelServer:
    def __init__(self, port: int, *, https: bool = False) -> None:
        self.port = port
        self.base_url = f"{'https' if https else 'http'}://127.0.0.1:{port}"
        self.requests: list[Request] = []
        self._replies: deque[Reply | Script] = deque()

    def script(self, *replies: Reply | Script) -> None:
        """Answer the next requests with ``replies``, in order; a callable makes its answer."""
        self._replies.extend(replies)

    def _next(self, request: Request) -> Reply:
        if not self._replies:
            return Reply(500, {"error": {"message": "the test scripted no more answers"}})
        reply = self._replies.popleft()
        return reply(request) if callable(reply) else reply

    async def handle(self, stream: ByteStream) -> None:
        async with stream:
            try:
                request = await _read_request(BufferedByteReceiveStream(stream))
            except (
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.BrokenResourceError,
                ssl.SSLError,
            ):
                return
            self.requests.append(request)
            reply = self._next(request)
            if reply.delay_seconds:
                await anyio.sleep(reply.delay_seconds)
            if reply.hang_up:
                return
            try:
                await stream.send(_response(reply))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return


async def _read_request(receive: BufferedByteReceiveStream) -> Request:
    head = await receive.receive_until(b"\r\n\r\n", MAX_HEAD_BYTES)
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    raw = await receive.receive_exactly(length) if length else b""
    return Request(method, path, headers, raw)


def _response(reply: Reply) -> bytes:
    payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
    try:
        phrase = HTTPStatus(reply.status).phrase
    except ValueError:
        phrase = "Unknown"
    head = [
        f"HTTP/1.1 {reply.status} {phrase}",
        "content-type: application/json",
        f"content-length: {len(payload)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in reply.headers.items()),
    ]
    sent = payload if reply.drop_after_bytes is None else payload[: reply.drop_after_bytes]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + sent


@asynccontextmanager
async def model_server(tls: ssl.SSLContext | None = None) -> AsyncIterator[ModelServer]:
    """The server, over TLS when given a server context (its ``base_url`` says https)."""
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = ModelServer(tcp.extra(SocketAttribute.local_port), https=tls is not None)
    listener: Listener[Any] = tcp if tls is None else TLSListener(tcp, tls)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            tasks.cancel_scope.cancel()


# -- answers in each API's shape ----------------------------------------------------------

Call = tuple[str, str, Any]
"""(id, name, arguments): a str is sent as the arguments' text, anything else as JSON."""


def openai_completion(
    text: str | None = None,
    calls: Iterable[Call] = (),
    *,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = (12, 5),
    model: str = "loopback-model-0613",
) -> dict[str, Any]:
    calls = list(calls)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
            for call_id, name, arguments in calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    return body


def openai_error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_message(
    text: str | None = None,
    calls: Iterable[Call] = (),
    *,
    stop_reason: str | None = None,
    usage: tuple[int, int] = (20, 7),
    model: str = "claude-loopback-20250101",
) -> dict[str, Any]:
    calls = list(calls)
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    content.extend(
        {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        for call_id, name, arguments in calls
    )
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
