"""One live session with an MCP server: opened at worker start, proven alive before each
call, opened again when found lost."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, TextIO, cast

import anyio
import anyio.abc
import attrs
import mcp.types as mcp_types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from leaseward.mcp.servers import MCPServer, Stdio
from leaseward.runtime.errors import CallNotStarted, ConfigurationError, ToolError
from leaseward.runtime.logs import get_logger

__all__ = ["REFUSALS", "STDERR_LINE_BYTES", "AnswerLost", "ResultRefused", "ServerConnection"]

log = get_logger("leaseward.mcp")

STDERR_LINE_BYTES = 2000
"""The most of a line of a stdio server's stderr one log event holds; a longer line
goes on in the next."""


def _first_cause(error: BaseException) -> str:
    """The first error a task group gathered, which names what went wrong."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


class AnswerLost(ConnectionError):
    """A call's request was sent and no answer says whether it ran: the session ended,
    or the server, its transport or a proxy failed with an error that is not a refusal.
    The call may have run; a write is settled as interrupted, never as not applied."""


class ResultRefused(Exception):
    """A call's answer came, and the SDK refused the result it holds: one its tool's output
    schema does not allow, or none where the tool declares one. The call ran."""


REFUSALS = frozenset(
    {mcp_types.METHOD_NOT_FOUND, mcp_types.INVALID_PARAMS, mcp_types.INVALID_REQUEST}
)
"""JSON-RPC errors a server answers before it runs anything: the request named no
method it has, or arguments or a shape it refused. Only these prove a call did not run.
An internal error, a parse error of the answer, a timeout or a gateway's 502 may come
after the tool applied its effect."""

_STAND_INS = (
    "server answered a request with 202 Accepted",
    "Unexpected content type",
    "Session terminated",
    "Redirect to ",
)
"""How the errors the SDK makes up for a Streamable HTTP answer it cannot read begin:
202 Accepted, a content type that is neither JSON nor an event stream, a 404 for the
session it had, a redirect it does not follow. They have the code of an invalid
request, a refusal; but the request reached the server or its gateway, the call may
have run, and its answer will never come."""


@attrs.define(eq=False)
class _Session:
    """A session held open by its own task until ``closing`` is set."""

    closing: anyio.Event = attrs.Factory(anyio.Event)
    ready: anyio.Event = attrs.Factory(anyio.Event)
    scope: anyio.CancelScope = attrs.Factory(anyio.CancelScope)
    session: ClientSession | None = None
    error: BaseException | None = None
    calls: int = 0
    """Calls sent on it and not yet answered."""
    retired: bool = False
    """No new call is given it; it closes once ``calls`` is back to zero."""
    http_error: str | None = None
    """The last HTTP error status a Streamable HTTP server answered it, such as
    ``401 Unauthorized``: the SDK's error of a refused request does not say it."""
    stderr_reader: threading.Thread | None = None
    """The thread that logs a stdio server's stderr; it ends once the process has."""
    last_stderr: str | None = None
    """The last line a stdio server's process wrote to stderr: why it ended, if it did."""

    def retire(self) -> None:
        # Other runs' calls may be under way on it: closing it now would cut them off
        # (for a stdio server, kill the process in the middle of their writes).
        self.retired = True
        if self.calls == 0:
            self.closing.set()


class ServerConnection:
    """The client side of one MCP server for one runtime.

    The session's transport (a subprocess, an HTTP connection) lives in a task of
    ``task_group``, which owns it from opening to closing as anyio requires.
    """

    def __init__(self, server: MCPServer, task_group: anyio.abc.TaskGroup) -> None:
        self.server = server
        self._task_group = task_group
        self._lock = anyio.Lock()
        self._current: _Session | None = None
        # Every session whose task holds it open: the current one, and those given up
        # with calls still on them.
        self._open_sessions: set[_Session] = set()

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists, following its pages, all of them within the
        connect timeout: a server whose pages never end must not hold the start for ever."""
        _, session = await self._live_session()
        tools: list[mcp_types.Tool] = []
        cursors: set[str] = set()
        cursor: str | None = None
        limit = self.server.connect_timeout_seconds
        with anyio.move_on_after(limit):
            while True:
                params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
                page = await session.list_tools(params=params)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools
                if cursor in cursors:
                    raise ConfigurationError("its listing names a page it has already sent")
                cursors.add(cursor)
        raise ConfigurationError(
            f"it did not list its tools within {limit:g} s ({len(tools)} listed by then)"
        )

    async def call(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> mcp_types.CallToolResult:
        """Call ``name``. CallNotStarted if no live session could carry the request
        within half the call's timeout; ToolError if the server refused it before
        running anything (REFUSALS); ResultRefused if the SDK refused the result that
        came; AnswerLost for any other failure after it was sent, since the call may
        have run."""
        live = None
        # Stopped by its timeout while a ping waits or a new session opens, a call
        # that never left would count as one that may have run: a write would be
        # dead-lettered for an operator. Given up before, it is retried.
        within = self.server.timeout_seconds / 2
        with anyio.move_on_after(within):
            live = await self._live_session()
        if live is None:
            raise CallNotStarted(
                f"MCP server {self.server.name!r} had no live session for the call of {name} "
                f"within {within:g} s, half its timeout; the call was not sent"
            )
        holder, session = live
        holder.calls += 1
        try:
            return await session.call_tool(
                name, dict(arguments), meta=cast(mcp_types.RequestParamsMeta, dict(meta))
            )
        except MCPError as exc:
            if exc.code in REFUSALS and not exc.message.startswith(_STAND_INS):
                raise ToolError(
                    f"MCP server {self.server.name!r} refused the call of {name}: {exc.message}"
                ) from exc
            # The session may be the broken part; the next call proves a new one first.
            self._give_up(holder)
            raise AnswerLost(
                f"the call of {name} to MCP server {self.server.name!r} was sent, and its "
                f"answer was lost (error {exc.code}: {exc.message}); it may have run"
            ) from exc
        except RuntimeError as exc:
            # The SDK's checks of the answer, made once it came; its words go on with the
            # schema and the instance, on lines of their own.
            checked = str(exc).partition("\n")[0]
            raise ResultRefused(
                f"MCP server {self.server.name!r} answered the call of {name}, and the SDK "
                f"refused its result: {checked}"
            ) from exc
        finally:
            holder.calls -= 1
            if holder.retired:
                holder.retire()

    def close(self) -> None:
        """Close every session, with any call still on it: the runtime is closing."""
        for holder in self._open_sessions:
            holder.closing.set()
        self._open_sessions.clear()
        self._current = None

    async def _live_session(self) -> tuple[_Session, ClientSession]:
        async with self._lock:
            current = self._current
            if current is not None and current.session is not None:
                try:
                    # A session whose transport died unnoticed would take the next
                    # request and fail it as if it had been sent.
                    with anyio.fail_after(self.server.connect_timeout_seconds):
                        await current.session.send_ping()
                    return current, current.session
                except Exception:
                    # Unanswered may mean busy, not dead: calls already on it go on.
                    self._give_up(current)
            return await self._open()

    def _give_up(self, holder: _Session) -> None:
        """Give no new call to ``holder``; it closes once the calls on it have ended."""
        if self._current is holder:
            self._current = None
        holder.retire()

    async def _open(self) -> tuple[_Session, ClientSession]:
        opening = _Session()
        self._task_group.start_soon(self._hold, opening)
        try:
            with anyio.move_on_after(self.server.connect_timeout_seconds):
                await opening.ready.wait()
        except BaseException:
            # The call that opened it was stopped (its timeout, a cut-off): nothing would
            # ever close a session known to no one, and the runtime's close would wait
            # for it for ever.
            opening.scope.cancel()
            raise
        if opening.session is None:
            opening.scope.cancel()
            if opening.error is None:
                why = f"it did not answer within {self.server.connect_timeout_seconds:g} s"
            else:
                why = _first_cause(opening.error)
                said = await _last_words(opening)
                if said is not None:
                    why += f" (its last line on stderr: {said!r})"
            if opening.http_error is not None:
                why += f" (it answered HTTP {opening.http_error})"
            raise CallNotStarted(f"MCP server {self.server.name!r} could not be reached: {why}")
        self._current = opening
        self._open_sessions.add(opening)
        return opening, opening.session

    async def _hold(self, opening: _Session) -> None:
        try:
            with opening.scope:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport(opening))
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()
                    opening.session = session
                    opening.ready.set()
                    await opening.closing.wait()
        except Exception as exc:
            # A transport that fails, at opening or later, ends this session only:
            # the next call finds it gone and opens another.
            opening.error = exc
        finally:
            opening.session = None
            self._open_sessions.discard(opening)
            opening.ready.set()

    @asynccontextmanager
    async def _transport(self, opening: _Session) -> AsyncIterator[Any]:
        transport = self.server.transport
        if isinstance(transport, Stdio):
            parameters = StdioServerParameters(
                command=transport.command,
                args=list(transport.args),
                env=None if transport.env is None else dict(transport.env),
                cwd=transport.cwd,
            )
            with _stderr_logged(self.server.name, opening) as errlog:
                async with stdio_client(parameters, errlog=errlog) as streams:
                    yield streams
            return

        # The SDK's HTTP client (httpx2, the SDK's own dependency): only the status is read.
        async def answered(response: Any) -> None:
            if response.status_code >= 400:
                opening.http_error = f"{response.status_code} {response.reason_phrase}".strip()

        http = create_mcp_http_client(headers=dict(transport.headers or {}))
        http.event_hooks["response"].append(answered)
        # The SDK reads an answer for 300 s at most, and a call whose server allows it
        # longer was cut off there, its answer lost though it may have run: the call's
        # own timeout is its bound, and the client waits for the answer past it.
        given, server = http.timeout, self.server
        if given.read is not None:
            read = max(given.read, server.timeout_seconds + server.connect_timeout_seconds)
            http.timeout = (given.connect, read, given.write, given.pool)
        async with http, streamable_http_client(transport.url, http_client=http) as streams:
            try:
                yield streams
            finally:
                # The DELETE that ends the session is sent as the client closes, under these
                # timeouts: a server that never answers it would hold the runtime's close
                # (and a daemon's drain) as long as a call's answer may take.
                http.timeout = server.connect_timeout_seconds


async def _last_words(opening: _Session) -> str | None:
    """The last line the session's process wrote to stderr. Its stderr is read by a
    thread: a process that wrote why it failed and exited may not have been read to the
    end yet, though both ends of the pipe are closed by now."""
    if opening.stderr_reader is not None:
        await anyio.to_thread.run_sync(opening.stderr_reader.join, 1.0, abandon_on_cancel=True)
    return opening.last_stderr


@contextmanager
def _stderr_logged(server: str, opening: _Session) -> Iterator[TextIO]:
    """A stderr for a stdio server's process whose lines are logged, not passed through:
    the server's text would drive the operator's terminal and break JSON log lines."""
    reader, writer = os.pipe()
    opening.stderr_reader = threading.Thread(
        target=_log_lines,
        args=(reader, server, opening),
        name="leaseward-mcp-stderr",
        daemon=True,
    )
    opening.stderr_reader.start()
    with open(writer, "w", encoding="utf-8") as errlog:
        yield errlog


def _log_lines(reader: int, server: str, opening: _Session) -> None:
    # A thread of its own: a server may write at any time, whatever the event loop does.
    # It ends when the process and this side have both closed the pipe.
    with open(reader, "rb") as lines:
        while line := lines.readline(STDERR_LINE_BYTES):
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text:
                log.info("mcp.server_stderr", server=server, line=text)
                opening.last_stderr = text
