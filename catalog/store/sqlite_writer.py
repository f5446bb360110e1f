"""The SQLite registry's writer: one process owns the writer connection and runs the write
transactions that the gateway's workers hand it (catalog.store.sqlite_handoff), so workers on one
file never contend for SQLite's write lock, and their transactions share group commits
(catalog.store.sqlite_driver) as if they came from one process.

Each session (one Unix-socket connection of a worker; messages in catalog.store.writer_wire)
runs its transactions through `SqliteDriver.write()`: a transaction is a member of the open group
(a savepoint), its statements run as they arrive, and "commit" is answered only once the group's
COMMIT has returned (durable: synchronous=FULL), or with the outcome the driver gives
(CommitStateUnknownError, DatabaseError). A "call" runs a whole transaction in one message: a
procedure of catalog.store.writer_calls (a commit's swap, a namespace creation), as a member of
the open group, answered with its outcome once durable. A session that closes or stalls mid-transaction (a
worker died or hangs) is rolled back to its savepoint; the others' changes stay in the group.
A session that closes after "commit" but before its group's COMMIT starts fails the whole group
(rolled back, DatabaseError for every member): a worker that died cannot tell its client, who
may already have read the change as absent, so it must not appear afterwards.

Only processes of this user may connect: the socket lives in a directory only the user can
enter, and the peer's uid is checked again on every session (SO_PEERCRED). Such a process could
open the registry file directly anyway: the socket grants nothing the file does not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from typing import Any

from cedarberg.catalog.errors import CommitStateUnknownError
from cedarberg.catalog.store.driver import DatabaseError, IntegrityViolation
from cedarberg.catalog.store.idempotency import DuplicateKeyError
from cedarberg.catalog.store.server_writes import Outcome
from cedarberg.catalog.store.sqlite_driver import SqliteConnection, SqliteDriver
from cedarberg.catalog.store.tx import StoreTx
from cedarberg.catalog.store.writer_calls import PROCEDURES, Arguments, Procedure
from cedarberg.catalog.store.writer_wire import (
    WireError,
    frame,
    pack_values,
    read_message,
    unpack_mapping,
    unpack_values,
)

log = logging.getLogger(__name__)
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class _RolledBack(Exception):
    """The worker rolled its transaction back: leave the driver's write context by raising."""


class _Declined(Exception):
    """A call's procedure answered other than DONE: leave the write context, undoing its changes."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.name)
        self.outcome = outcome


def _same_user(writer: asyncio.StreamWriter) -> bool:
    sock: socket.socket = writer.get_extra_info("socket")
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return bool(uid == os.getuid())


async def _statement(conn: SqliteConnection, message: list[Any]) -> list[Any]:
    """Run one "exec" or "many" message; the reply (errors are replies: the worker decides)."""
    if len(message) != 3 or not isinstance(message[1], str) or not isinstance(message[2], list):
        raise WireError("malformed statement")
    op, sql, args = message
    try:
        if op == "exec":
            raw, rowcount = await conn.run(sql, unpack_values(args))
            return ["rows", None if raw is None else [pack_values(row) for row in raw], rowcount]
        if op == "many":
            await conn.run_many(sql, [unpack_values(each) for each in args])
            return ["ok"]
    except IntegrityViolation as err:
        return ["integrity", err.foreign_key, err.detail]
    except DatabaseError as err:
        return ["database", str(err)]
    raise WireError("unknown operation")


class SqliteWriter:
    """Serves the workers' write transactions on `driver` (see the module docstring). `patience`:
    how long a worker may leave its open transaction without its next message before it is
    rolled back (the write lock is held meanwhile)."""

    def __init__(self, driver: SqliteDriver, *, patience: float) -> None:
        self.driver = driver
        self._patience = patience

    async def serve(self, listener: socket.socket, stop: asyncio.Event) -> None:
        """Accept sessions on `listener` (a listening Unix socket) until `stop` is set, then let
        the transactions under way finish their group's COMMIT and close the driver."""
        server = await asyncio.start_unix_server(self._session, sock=listener)
        try:
            await stop.wait()
        finally:
            server.close()
            await self.driver.close()
            log.info("registry writer stopped: %s", self.driver.counts.describe())

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not _same_user(writer):
                log.warning("refused a registry writer session from another user")
                return
            while (message := await read_message(reader)) is not None:
                if message == ["begin"]:
                    await self._transaction(reader, writer)
                elif message[:1] == ["call"]:
                    await self._call(message, reader, writer)
                else:
                    log.warning("registry writer session ended: a message out of place")
                    break
        except (WireError, ConnectionError, TimeoutError) as err:
            log.warning("registry writer session ended: %s", err or type(err).__name__)
        finally:
            writer.close()

    async def _transaction(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One write transaction of a session, from "begin" to its outcome. Raises WireError,
        ConnectionError, TimeoutError when the session cannot go on (its changes rolled back)."""
        try:
            # The worker sends nothing between "commit" and the answer: a session at its end
            # by then belongs to a worker that died, and its group is rolled back, not committed.
            async with self.driver.write(requester_gone=reader.at_eof) as conn:
                await _send(writer, ["ok"])
                await self._statements(conn, reader, writer)
        except _RolledBack:
            reply = ["ok"]
        except CommitStateUnknownError:
            reply = ["unknown"]
        except DatabaseError as err:
            reply = ["database", str(err)]
        else:
            reply = ["ok"]
        await _send(writer, reply)

    async def _call(
        self, message: list[Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One whole transaction in one message: a procedure of catalog.store.writer_calls, run as a
        member of the open group and answered as "commit" is (its outcome once durable). An outcome
        other than DONE, or a constraint, rolls the member back: nothing of it is written."""
        if len(message) != 3 or not isinstance(message[2], dict) or message[1] not in PROCEDURES:
            raise WireError("malformed or unknown call")
        procedure, args = PROCEDURES[message[1]], unpack_mapping(message[2])
        try:
            # As in `_transaction`: a session at its end before the COMMIT is a worker that died.
            async with self.driver.write(requester_gone=reader.at_eof) as conn:
                await _run_procedure(procedure, args, conn)
        except _Declined as declined:
            reply: list[Any] = ["outcome", int(declined.outcome)]
        except (IntegrityViolation, DuplicateKeyError):
            reply = ["outcome", int(Outcome.GENERAL)]  # the general transaction words the refusal
        except CommitStateUnknownError:
            reply = ["unknown"]
        except DatabaseError as err:
            reply = ["database", str(err)]
        else:
            reply = ["outcome", int(Outcome.DONE)]
        await _send(writer, reply)

    async def _statements(
        self, conn: SqliteConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Run the transaction's statements until "commit" (returns) or "rollback" (raises
        _RolledBack); ConnectionError, TimeoutError, WireError if the session fails."""
        while True:
            async with asyncio.timeout(self._patience):
                message = await read_message(reader)
            if message is None:
                raise ConnectionError("worker closed the session mid-transaction")
            if message == ["commit"]:
                return
            if message == ["rollback"]:
                raise _RolledBack
            await _send(writer, await _statement(conn, message))


async def _run_procedure(procedure: Procedure, args: Arguments, conn: SqliteConnection) -> None:
    """Run a call's procedure on the member's connection; _Declined unless it answers DONE."""
    outcome = await procedure(StoreTx(conn), args)
    if outcome is not Outcome.DONE:
        raise _Declined(outcome)


async def _send(writer: asyncio.StreamWriter, message: list[Any]) -> None:
    writer.write(frame(message))
    await writer.drain()
