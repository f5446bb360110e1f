"""The registry on PostgreSQL through asyncpg directly.

Each connection keeps asyncpg's statement cache, so a registry statement is parsed and planned
once per connection and then runs as a prepared statement. The pool is the store's own, a list of
idle connections under a semaphore: no pre-ping and no reset query per checkout (a connection
that failed is closed instead of returned, so the next checkout opens a fresh one).

Invariants:
- Sessions run with `POSTGRES_SERVER_SETTINGS` (synchronous_commit on, whatever the server's
  default): a commit is acknowledged only once it is durable; a statement whose client has gone
  is aborted (client_connection_check_interval), not left to commit later.
- A write transaction is BEGIN ... COMMIT on one connection; an error while committing is
  CommitStateUnknownError. Reads run in autocommit (one READ COMMITTED snapshot per statement,
  as reads inside a default transaction had).
- A connection whose state is unknown (lost, cancelled mid-statement, failed rollback) is
  terminated, never pooled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import asyncpg
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import Dialect

from cedarberg.catalog.errors import CommitStateUnknownError
from cedarberg.catalog.store.driver import DatabaseError, IntegrityViolation, PoolWatch
from cedarberg.catalog.store.statements import NO_PARAMS, Rows, Sql

POSTGRES_SERVER_SETTINGS = {
    "synchronous_commit": "on",
    # A write sent as one autocommit statement (catalog.store.server_writes) commits when it ends,
    # even after the gateway gave up on it (shutdown cut it off, the process died): PostgreSQL runs
    # a statement to its end whether or not its client is still there. The server checks the
    # client's socket this often while a statement runs and aborts the statement (rolled back)
    # once the client is gone, so a write the gateway abandoned while it waited (for a row lock,
    # say) does not land seconds later. PostgreSQL 14 or later.
    "client_connection_check_interval": "1000",
}
CHECKOUT_TIMEOUT_SECONDS = 30.0  # all connections busy this long: the registry is unavailable
# A server that accepts TCP connections but does not answer (paused, overloaded, a half-open
# network path) is unavailable after these, rather than holding requests for ever: opening a
# connection (asyncpg's own default is 60 s), and any one statement (no default bound at all).
CONNECT_TIMEOUT_SECONDS = 10.0
STATEMENT_TIMEOUT_SECONDS = 30.0
DIALECT: Dialect = PGDialect_asyncpg()  # type: ignore[no-untyped-call]
# Failures after which the connection itself is not trusted (as opposed to a refused statement).
# InternalClientError is asyncpg's protocol state gone wrong, e.g. "cannot switch to state 12;
# another operation is in progress" on a pooled connection the server closed while it was idle
# (a PostgreSQL shutdown): the registry is unavailable, not a bug of the request.
_CONNECTION_ERRORS = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    OSError,
    asyncio.TimeoutError,
)


def connect_arguments(url: str) -> dict[str, Any]:
    """asyncpg.connect arguments for a `postgresql+asyncpg://` URL."""
    parsed = make_url(url)
    args: dict[str, Any] = parsed.translate_connect_args(username="user", database="database")
    args.update(parsed.query)
    return args


def _rowcount(status: str) -> int:
    """The row count of a command status such as "UPDATE 1" or "INSERT 0 3"."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0


class PostgresConnection:
    __slots__ = ("_conn", "broken")

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self.broken = False

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    async def execute(self, sql: Sql, params: Mapping[str, Any] = NO_PARAMS) -> Rows:
        compiled = sql.compiled(DIALECT)
        try:
            if compiled.row_type is None:
                status = await self._conn.execute(compiled.sql, *compiled.args(params))
                return Rows([], _rowcount(status))
            records = await self._conn.fetch(compiled.sql, *compiled.args(params))
        except BaseException as err:
            self._raise_mapped(err)
        make = compiled.row_type._make  # type: ignore[attr-defined]
        return Rows([make(record) for record in records], len(records))

    async def execute_many(self, sql: Sql, params: Sequence[Mapping[str, Any]]) -> None:
        compiled = sql.compiled(DIALECT)
        try:
            await self._conn.executemany(compiled.sql, [compiled.args(p) for p in params])
        except BaseException as err:
            self._raise_mapped(err)

    async def command(self, sql: str) -> None:
        """A statement without arguments (BEGIN, COMMIT, ROLLBACK)."""
        try:
            await self._conn.execute(sql)
        except BaseException as err:
            self._raise_mapped(err)

    def _raise_mapped(self, err: BaseException) -> NoReturn:
        if isinstance(err, asyncpg.IntegrityConstraintViolationError):
            detail = f"{err} {getattr(err, 'constraint_name', '') or ''}".lower()
            raise IntegrityViolation(isinstance(err, asyncpg.ForeignKeyViolationError), detail) from None
        if isinstance(err, asyncpg.PostgresError) and not isinstance(err, asyncpg.PostgresConnectionError):
            raise DatabaseError(type(err).__name__) from err  # refused statement: the connection is fine
        self.broken = True  # lost, cancelled mid-statement, or a failure of the client itself
        if isinstance(err, _CONNECTION_ERRORS):
            raise DatabaseError(type(err).__name__) from err
        raise err


class PostgresDriver:
    """The registry's PostgreSQL connections (see the module docstring)."""

    def __init__(self, url: str, capacity: int) -> None:
        self._connect_args = connect_arguments(url)
        self._capacity = max(1, capacity)
        self._slots = asyncio.Semaphore(self._capacity)
        self._idle: list[asyncpg.Connection] = []
        self._watch = PoolWatch()
        self._closed = False

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    @property
    def capacity(self) -> int:
        return self._capacity

    def watch(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None:
        self._watch.checked_out, self._watch.checked_in = checked_out, checked_in

    async def _connect(self) -> asyncpg.Connection:
        try:
            # Module attributes read at each connect: tests shorten them.
            bounds = {"timeout": CONNECT_TIMEOUT_SECONDS, "command_timeout": STATEMENT_TIMEOUT_SECONDS}
            conn: asyncpg.Connection = await asyncpg.connect(
                **{**bounds, **self._connect_args}, server_settings=POSTGRES_SERVER_SETTINGS
            )
        except (asyncpg.PostgresError, *_CONNECTION_ERRORS) as err:
            raise DatabaseError(type(err).__name__) from err
        return conn

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PostgresConnection]:
        if self._slots.locked():  # every connection is in use: wait, but not for ever
            try:
                async with asyncio.timeout(CHECKOUT_TIMEOUT_SECONDS):
                    await self._slots.acquire()
            except TimeoutError:
                raise DatabaseError("PoolTimeout") from None
        else:
            await self._slots.acquire()
        try:
            raw = None
            while self._idle and raw is None:
                candidate = self._idle.pop()
                if not candidate.is_closed():
                    raw = candidate
            if raw is None:
                raw = await self._connect()
            conn = PostgresConnection(raw)
            self._watch.checked_out()
            try:
                yield conn
            except BaseException:
                conn.broken = conn.broken or raw.is_in_transaction()
                raise
            finally:
                self._watch.checked_in()
                if conn.broken or self._closed or raw.is_closed():
                    raw.terminate()
                else:
                    self._idle.append(raw)
        finally:
            self._slots.release()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[PostgresConnection]:
        async with self._connection() as conn:
            await conn.command("BEGIN")
            try:
                yield conn
            except Exception:
                if not conn.broken:
                    try:
                        await conn.command("ROLLBACK")
                    except Exception:
                        conn.broken = True
                raise
            except BaseException:
                conn.broken = True  # cancelled: the server rolls back when the connection closes
                raise
            try:
                await conn.command("COMMIT")
            except (DatabaseError, *_CONNECTION_ERRORS) as err:
                conn.broken = True
                raise CommitStateUnknownError("the registry did not confirm the commit") from err

    async def write_alone(self, sql: Sql, params: Mapping[str, Any]) -> Rows:
        """Run one writing statement as its own transaction (autocommit). Raises IntegrityViolation
        or DatabaseError when it was refused (nothing written), CommitStateUnknownError when it
        was sent but not answered."""
        async with self._connection() as conn:
            try:
                return await conn.execute(sql, params)
            except DatabaseError as err:
                if conn.broken:  # the server may have committed it before the connection failed
                    raise CommitStateUnknownError("the registry did not confirm the write") from err
                raise

    @asynccontextmanager
    async def read(self) -> AsyncIterator[PostgresConnection]:
        async with self._connection() as conn:
            yield conn

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(conn.close(timeout=5) for conn in idle), return_exceptions=True)
