"""A worker's SQLite registry when another process owns the writer (catalog.store.sqlite_writer):
reads run here, on the worker's own connections (WAL readers never wait for the writer), and
each write transaction runs in the writer process, statement by statement over a Unix socket
(catalog.store.writer_wire), or whole in one message for the common writes (`call`:
catalog.store.writer_calls), so the workers of one gateway never contend for SQLite's write lock
and their transactions share the writer's group commits.

What a caller sees is what `SqliteDriver.write()` promises: the transaction is committed, and
durable, when the context exits normally; rolled back when the body raises; an error once
"commit" has been sent is CommitStateUnknownError (the writer may have committed it). A writer
that cannot be reached, or does not answer within `patience`, fails the transaction with
DatabaseError before anything was committed.

`hand_writes_to` routes a registry file's writes to a writer's socket for the whole process
(`open_driver` asks `writer_socket_for`); the gateway's supervisor sets it in each worker.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from sqlalchemy.engine.interfaces import Dialect

from cedarberg.catalog.errors import CommitStateUnknownError
from cedarberg.catalog.store.driver import DatabaseError, IntegrityViolation, PoolWatch
from cedarberg.catalog.store.sqlite_driver import DIALECT, SqliteConnection, SqliteDriver
from cedarberg.catalog.store.statements import NO_PARAMS, Rows, Sql
from cedarberg.catalog.store.writer_wire import (
    WireError,
    frame,
    pack_mapping,
    pack_values,
    read_message,
    unpack_values,
)

IDLE_SESSIONS = 8  # sessions kept open for the next transactions; more are opened as needed
_UNAVAILABLE = "WriterUnavailable"
_writers: dict[str, str] = {}  # registry file (real path) -> its writer's socket


def hand_writes_to(path: str, socket_path: str | None) -> None:
    """From now on, drivers opened in this process for the registry file `path` hand their
    write transactions to the writer listening on `socket_path` (None: write themselves)."""
    if socket_path is None:
        _writers.pop(os.path.realpath(path), None)
    else:
        _writers[os.path.realpath(path)] = socket_path


def writer_socket_for(path: str) -> str | None:
    """The writer socket `hand_writes_to` named for `path`, or None (write here)."""
    return _writers.get(os.path.realpath(path)) if _writers else None


def _refusal(reply: list[Any]) -> Exception:
    """The exception an error reply stands for."""
    if reply[0] == "integrity" and len(reply) == 3:
        return IntegrityViolation(bool(reply[1]), str(reply[2]))
    if reply[0] == "database" and len(reply) == 2:
        return DatabaseError(str(reply[1]))
    return DatabaseError(_UNAVAILABLE)  # not a reply this side knows: the writer is not one


class _Session:
    """One connection to the writer; closed (and not reused) after anything unexpected."""

    __slots__ = ("_patience", "_reader", "_writer", "broken")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, patience: float) -> None:
        self._reader, self._writer, self._patience = reader, writer, patience
        self.broken = False

    async def ask(self, message: list[Any]) -> list[Any]:
        """Send `message`, return the writer's reply. Raises DatabaseError if the session fails
        or the writer does not answer in time (the session is closed: the writer then rolls
        back its open transaction); a cancelled ask closes the session too."""
        try:
            self._writer.write(frame(message))
            async with asyncio.timeout(self._patience):
                reply = await read_message(self._reader)
        except (WireError, OSError, TimeoutError) as err:
            self.close()
            raise DatabaseError(_UNAVAILABLE) from err
        except BaseException:
            self.close()
            raise
        if reply is None:
            self.close()
            raise DatabaseError(_UNAVAILABLE)
        return reply

    @property
    def stale(self) -> bool:
        """The writer closed this session (it died and was replaced since it was last used)."""
        return self._reader.at_eof() or self._writer.is_closing()

    def close(self) -> None:
        self.broken = True
        self._writer.close()


class HandedOffConnection:
    """A write transaction's statements, run by the writer process."""

    __slots__ = ("_session",)

    def __init__(self, session: _Session) -> None:
        self._session = session

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    async def execute(self, sql: Sql, params: Mapping[str, Any] = NO_PARAMS) -> Rows:
        compiled = sql.compiled(DIALECT)
        reply = await self._session.ask(["exec", compiled.sql, pack_values(compiled.args(params))])
        if reply[0] != "rows" or len(reply) != 3:
            raise _refusal(reply)
        if reply[1] is None:
            return Rows([], int(reply[2]))
        raw = [unpack_values(row) for row in reply[1]]
        make = compiled.row_type
        return Rows(raw if make is None else [make._make(row) for row in raw], len(raw))  # type: ignore[attr-defined]

    async def execute_many(self, sql: Sql, params: Sequence[Mapping[str, Any]]) -> None:
        compiled = sql.compiled(DIALECT)
        reply = await self._session.ask(
            ["many", compiled.sql, [pack_values(compiled.args(p)) for p in params]]
        )
        if reply != ["ok"]:
            raise _refusal(reply)


class HandedOffSqliteDriver:
    """The registry's SQLite driver in a worker whose writes go to the writer process (see the
    module docstring); `counts` are the local readers' (the writer's are in that process)."""

    def __init__(self, path: str, socket_path: str, *, readers: int = 4, busy_timeout: float = 10.0) -> None:
        self._local = SqliteDriver(path, readers=readers, busy_timeout=busy_timeout)
        self._socket_path = socket_path
        # The writer waits up to busy_timeout for another process's lock (a CLI command), then
        # answers; twice that without an answer means it is gone or stuck.
        self._patience = 2 * busy_timeout
        self._idle: list[_Session] = []
        self._watch = PoolWatch()
        self.counts = self._local.counts

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    @property
    def capacity(self) -> int:
        return self._local.capacity

    def watch(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None:
        self._local.watch(checked_out, checked_in)
        self._watch.checked_out, self._watch.checked_in = checked_out, checked_in

    def read(self) -> AbstractAsyncContextManager[SqliteConnection]:
        return self._local.read()

    async def _connect(self) -> _Session:
        try:
            async with asyncio.timeout(self._patience):
                reader, writer = await asyncio.open_unix_connection(self._socket_path)
        except (OSError, TimeoutError) as err:
            raise DatabaseError(_UNAVAILABLE) from err
        return _Session(reader, writer, self._patience)

    async def _begin(self) -> tuple[_Session, list[Any]]:
        """A session with "begin" sent, and the writer's reply. An idle session that fails
        (its writer died and was replaced since) is dropped with the other idle ones, and the
        transaction begins on a new session: nothing had happened on the old one."""
        if self._idle:
            session = self._idle.pop()
            try:
                return session, await session.ask(["begin"])
            except DatabaseError:
                for stale in self._idle:
                    stale.close()
                self._idle.clear()
        session = await self._connect()
        return session, await session.ask(["begin"])

    async def call(self, procedure: str, args: Mapping[str, Any]) -> int:
        """Run the writer's `procedure` (catalog.store.writer_calls) as one transaction, in one round
        trip: its outcome, once durable if it wrote. Raises DatabaseError (nothing was written: the
        writer refused, or could not be reached), CommitStateUnknownError (sent, not confirmed)."""
        session = self._idle_session() or await self._connect()
        self._watch.checked_out()
        try:
            reply = await session.ask(["call", procedure, pack_mapping(args)])
        except DatabaseError as err:
            raise CommitStateUnknownError("the registry did not confirm the commit") from err
        finally:
            self._watch.checked_in()
        if reply == ["unknown"]:
            self._give_back(session)
            raise CommitStateUnknownError("the registry did not confirm the commit")
        if reply[0] == "outcome" and len(reply) == 2 and isinstance(reply[1], int):
            self._give_back(session)
            return reply[1]
        raise self._refused(session, reply)

    def _refused(self, session: _Session, reply: list[Any]) -> Exception:
        """The error `reply` stands for. The session is kept if the writer answered in turn (an
        error it reports), closed otherwise (it does not speak the protocol)."""
        if reply[0] == "database":
            self._give_back(session)
        else:
            session.close()
        return _refusal(reply)

    def _idle_session(self) -> _Session | None:
        """An idle session the writer has not closed (a call on a closed one could not tell a
        writer replaced since from one that died during the call); None if there is none."""
        while self._idle:
            session = self._idle.pop()
            if not session.stale:
                return session
            session.close()
        return None

    def _give_back(self, session: _Session) -> None:
        if session.broken:
            return
        if len(self._idle) < IDLE_SESSIONS:
            self._idle.append(session)
        else:
            session.close()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[HandedOffConnection]:
        session, reply = await self._begin()
        if reply != ["ok"]:
            self._give_back(session)
            raise _refusal(reply)
        self._watch.checked_out()
        try:
            yield HandedOffConnection(session)
        except asyncio.CancelledError:
            self._watch.checked_in()
            session.close()  # no round trip while cancelled: the writer rolls back a closed session
            raise
        except BaseException:
            self._watch.checked_in()
            await self._roll_back(session)
            raise
        self._watch.checked_in()
        try:
            reply = await session.ask(["commit"])
        except DatabaseError as err:
            raise CommitStateUnknownError("the registry did not confirm the commit") from err
        self._give_back(session)
        if reply == ["unknown"]:
            raise CommitStateUnknownError("the registry did not confirm the commit")
        if reply != ["ok"]:
            raise _refusal(reply)

    async def _roll_back(self, session: _Session) -> None:
        """Undo the transaction in the writer; a session that cannot is closed, which the writer
        takes as a rollback too.

        The transaction may have failed on what earlier members of its group wrote (a name found
        taken, an object found gone), so its failure stands only once the writer confirms that
        group durable: the writer answers the rollback after the group's COMMIT. Raises
        DatabaseError (the caller answers 503, retryable) when the writer says the group never
        committed or cannot be asked: the failure may describe a state that never existed."""
        if session.broken:
            return  # the failure is this session's own (the writer was lost mid-statement)
        reply = await session.ask(["rollback"])
        if reply == ["ok"]:
            self._give_back(session)
            return
        raise self._refused(session, reply)

    async def close(self) -> None:
        for session in self._idle:
            session.close()
        self._idle.clear()
        await self._local.close()


__all__ = ["HandedOffSqliteDriver", "hand_writes_to", "writer_socket_for"]
