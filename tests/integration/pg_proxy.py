"""A TCP proxy in front of PostgreSQL that can lose the answer to a COMMIT.

It reads the client's side of the wire protocol message by message. Once armed,
the next ``COMMIT`` a client sends goes to the server, the server's answer is
read and thrown away (so the commit has certainly happened), and both sockets
are closed: the client learns nothing of how its commit ended, exactly as when
a network path dies at that moment. A journal batch written in one statement
(``leaseward_write_journal``, committed on its own at the Sync that follows its
Execute) counts as a COMMIT. Clients must not ask for TLS
(``sslmode=disable``): the proxy has to read their messages.

It can hold every answer for a while (``answer_delay_seconds``), as a server a
network away answers, or the answer to one statement (``hold_answer``), as a
server that answers it late. It can also partition its clients from the server: while
partitioned nothing goes through in either direction and new connections get no
server, so every statement hangs as on a dead network path; healing resets every
connection that tried to carry anything, or was made, meanwhile, as a path that
comes back to find its peers' sockets gone (an idle one lives on). And it can hold the
end of a session the server ends (``hold_close``): its last message goes through, its
socket's end comes later, as when a terminated backend's goodbye arrives ahead of the
connection's close.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["CommitDropper"]

# Untyped messages a client may send before its startup message proper.
_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


# A statement that commits on its own, outside a transaction.
_COMMITS_ALONE = b"leaseward_write_journal("


def _ready_for_query(stream: bytes) -> bool:
    """Whether the server's messages in ``stream`` (from a message's start) reach a
    ReadyForQuery."""
    at = 0
    while at + 5 <= len(stream):
        if stream[at : at + 1] == b"Z":
            return True
        at += 1 + int.from_bytes(stream[at + 1 : at + 5], "big")
    return False


class _Link:
    def __init__(self) -> None:
        self.lose_answer = False
        # Seconds to hold the server's next answer for, once a held statement was sent.
        self.hold_answer_seconds = 0.0
        self.writers: list[asyncio.StreamWriter] = []
        # Prepared statements (by name) that commit alone, and whether one was bound
        # since the last Sync.
        self.committing_statements: set[bytes] = set()
        self.commit_bound = False
        # The server ended the session; its socket's end is held back from the client.
        self.server_ended = False

    def close(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


class CommitDropper:
    """``async with CommitDropper(host, port) as proxy``: clients connect to ``proxy.port``."""

    def __init__(self, host: str, port: int, *, answer_delay_seconds: float = 0.0) -> None:
        self._upstream = (host, port)
        self._answer_delay = answer_delay_seconds
        self._armed = 0
        self._skip = 0
        self._held_statement: tuple[bytes, float] | None = None
        self._partition_after_drop = False
        self._close_delay = 0.0
        self._healed = asyncio.Event()
        self._healed.set()
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self.port = 0
        self.dropped = 0
        self.commits_seen = 0

    def arm(self, commits: int = 1, *, skip: int = 0, then_partition: bool = False) -> None:
        """Lose the answers to the next ``commits`` COMMITs, whichever connections send them,
        once ``skip`` more have gone through; with ``then_partition``, partition right
        after the first answer is lost."""
        self._armed = commits
        self._skip = skip
        self._partition_after_drop = then_partition

    def hold_answer(self, statement: bytes, seconds: float) -> None:
        """Hold the answer to the next simple query that starts with ``statement`` (as
        asyncpg sends BEGIN and COMMIT), on whichever connection, for ``seconds``."""
        self._held_statement = (statement.upper(), seconds)

    def hold_close(self, seconds: float) -> None:
        """From now on a connection the server ends stays open towards its client for
        ``seconds`` after the server's last message, unless the client writes to it."""
        self._close_delay = seconds

    def partition(self) -> None:
        """From now on nothing goes through, until :meth:`heal`."""
        self._healed.clear()

    def heal(self) -> None:
        """End the partition: every connection held in it is reset."""
        self._healed.set()

    @property
    def partitioned(self) -> bool:
        return not self._healed.is_set()

    @property
    def armed(self) -> bool:
        return self._armed > 0

    def url(self, database: str, user: str = "postgres", **options: str) -> str:
        query = "&".join(
            f"{key}={value}" for key, value in {"sslmode": "disable", **options}.items()
        )
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}?{query}"

    async def __aenter__(self) -> CommitDropper:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            link.close()
        await self._server.wait_closed()

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        link = _Link()
        if self.partitioned:
            await self._healed.wait()
            client_out.transport.abort()
            return
        try:
            server_in, server_out = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_out.transport.abort()
            return
        link.writers = [client_out, server_out]
        self._links.add(link)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._from_client(link, client_in, server_out))
                tg.create_task(self._from_server(link, server_in, client_out))
        except* (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.close()
            self._links.discard(link)

    async def _from_client(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        starting = True
        while True:
            if starting:
                head = await reader.readexactly(4)
                body = await reader.readexactly(int.from_bytes(head, "big") - 4)
                code = int.from_bytes(body[:4], "big")
                starting = code in (_SSL_REQUEST, _GSSENC_REQUEST)
                message = head + body
            else:
                kind = await reader.readexactly(1)
                head = await reader.readexactly(4)
                body = await reader.readexactly(int.from_bytes(head, "big") - 4)
                message = kind + head + body
                held = self._held_statement
                if kind == b"Q" and held and body.lstrip().upper().startswith(held[0]):
                    self._held_statement = None
                    link.hold_answer_seconds = held[1]
                # asyncpg commits with a simple query, "COMMIT;"; a statement that
                # commits alone is bound to its prepared name, and commits at the Sync.
                if kind == b"Q" and body.lstrip().upper().startswith(b"COMMIT"):
                    self._commit_seen(link)
                elif kind == b"P":
                    name, _, rest = body.partition(b"\0")
                    if _COMMITS_ALONE in rest.partition(b"\0")[0]:
                        link.committing_statements.add(name)
                elif kind == b"B":
                    statement = body.split(b"\0", 2)[1]
                    link.commit_bound = statement in link.committing_statements
                elif kind == b"S" and link.commit_bound:
                    link.commit_bound = False
                    self._commit_seen(link)
            if self.partitioned:
                await self._cut_at_heal(link)
                return
            if link.server_ended:
                # As a socket whose peer is gone answers the next write: with a reset.
                link.close()
                return
            writer.write(message)
            await writer.drain()

    def _commit_seen(self, link: _Link) -> None:
        self.commits_seen += 1
        if self._armed > 0 and self._skip > 0:
            self._skip -= 1
        elif self._armed > 0:
            self._armed -= 1
            link.lose_answer = True

    async def _from_server(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                link.server_ended = True
                await asyncio.sleep(self._close_delay)
                link.close()
                return
            if link.lose_answer:
                # The client sends nothing after the commit until it is answered, so
                # this is the answer, from a message's start: thrown away up to its
                # ReadyForQuery, sent once the commit is done, the client never hears.
                answer = data
                while not _ready_for_query(answer):
                    more = await reader.read(65536)
                    if not more:
                        break
                    answer += more
                self.dropped += 1
                if self._partition_after_drop:
                    self._partition_after_drop = False
                    self.partition()
                link.close()
                return
            if self.partitioned:
                await self._cut_at_heal(link)
                return
            if self._answer_delay:
                await asyncio.sleep(self._answer_delay)
            if link.hold_answer_seconds:
                # The client sends nothing after the statement until it is answered.
                await asyncio.sleep(link.hold_answer_seconds)
                link.hold_answer_seconds = 0.0
            writer.write(data)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    async def _cut_at_heal(self, link: _Link) -> None:
        await self._healed.wait()
        link.close()
