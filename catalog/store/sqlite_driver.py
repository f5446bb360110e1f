"""The registry on SQLite through the plain `sqlite3` module, without a thread hop per statement.

Statements on a local SQLite file take microseconds, less than handing them to a thread and back,
so they run inline on the event loop. What can take long never does:
- Waiting for the write lock held by another process (the gateway's workers, a CLI command share
  the file): connections use busy_timeout 0, and `BEGIN IMMEDIATE` (like any statement refused
  as busy) is retried with asyncio.sleep and a bounded backoff until `busy_timeout` has passed,
  then DatabaseError. The loop keeps serving meanwhile.
- The COMMIT of a write transaction, which syncs the WAL (synchronous=FULL: a commit survives
  power loss once acknowledged), runs on one dedicated thread: the transaction's only hop.
- Opening a connection (once per connection: it may wait for WAL recovery) runs on that thread.

Group commit: writers that queue up while a COMMIT syncs join the next transaction, each inside
a savepoint, and share its COMMIT (at most MAX_GROUP of them): one sync and one thread crossing
for all. A writer that fails rolls back to its savepoint, taking back only its own changes; every
writer of the group returns only once the shared COMMIT has finished (a failing one too, when
earlier members' changes were in its transaction: it may have failed on them, and must not answer
before they are durable; DatabaseError if they never are), and each learns its outcome
(an error while committing is CommitStateUnknownError for all, except a full disk, which refuses
the COMMIT before it happens: DatabaseError; a transaction SQLite rolled back entirely is
DatabaseError for all). A member whose requester is gone by the time of the COMMIT (the registry
writer's worker died after asking to commit: catalog.store.sqlite_writer) makes the group roll
back instead, DatabaseError for all: nothing lands that its client may have read as absent.

Invariants:
- One writer connection; the in-process lock serialises the writers' bodies (one at a time,
  each in its savepoint) and is released only when the COMMIT (or ROLLBACK) has finished on the
  commit thread, even if a waiting task was cancelled, so no two transactions share the
  connection and nobody touches it mid-COMMIT.
- Readers use their own connections (`readers` of them kept open), in autocommit: each statement
  reads the latest committed WAL snapshot and never sees the writer's uncommitted changes.
- Every connection sets the pragmas of `SQLITE_PRAGMAS` (WAL, foreign keys, synchronous=FULL).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine.interfaces import Dialect

from cedarberg.catalog.errors import CommitStateUnknownError
from cedarberg.catalog.store.commit_thread import CommitThread, settle
from cedarberg.catalog.store.driver import DatabaseError, IntegrityViolation, PoolWatch
from cedarberg.catalog.store.statements import NO_PARAMS, Rows, Sql

SQLITE_SYNCHRONOUS = "FULL"  # see catalog.store.engine: the same durability for every connection
SQLITE_PRAGMAS = (
    "PRAGMA foreign_keys=ON",
    "PRAGMA journal_mode=WAL",
    f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}",
)
_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_FULL = 13  # SQLITE_FULL
_FIRST_BACKOFF = 0.001
_MAX_BACKOFF = 0.025
MAX_GROUP = 16  # most writers sharing one transaction (bounds the first one's wait)
DIALECT: Dialect = SQLiteDialect_pysqlite()


def _is_busy(err: sqlite3.Error) -> bool:
    return isinstance(err, sqlite3.OperationalError) and (getattr(err, "sqlite_errorcode", 0) & 0xFF) in _BUSY


def _is_full(err: sqlite3.Error) -> bool:
    """A COMMIT refused because the disk is full did not commit, so it is not an unknown outcome:
    in WAL mode a commit exists once its last frame (the one marked as a commit) is written, and
    a full disk fails a write of the frames up to that one (an I/O error while syncing after it,
    SQLITE_IOERR, may leave it committed, and stays unknown)."""
    return (getattr(err, "sqlite_errorcode", 0) & 0xFF) == _FULL


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection with the registry's pragmas (on the commit thread: opening may wait)."""
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        for pragma in SQLITE_PRAGMAS:
            conn.execute(pragma)
        conn.execute("PRAGMA busy_timeout=0")  # from now on the loop waits, asynchronously
    except BaseException:
        conn.close()
        raise
    return conn


def _commit(conn: sqlite3.Connection) -> None:
    """COMMIT (on the commit thread); a failed COMMIT leaves no transaction open behind it."""
    try:
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class SqliteCounts:
    """What the driver did that costs (for tests, logs and profiles, never for control):
    `commits` COMMITs run (one per group, each a sync of the WAL), `transactions` the write
    transactions those COMMITs carried, `busy_waits` statements or BEGINs refused because another
    connection held the write lock (each followed by a wait and a retry)."""

    __slots__ = ("busy_waits", "commits", "transactions")

    def __init__(self) -> None:
        self.commits = 0
        self.transactions = 0
        self.busy_waits = 0

    def describe(self) -> str:
        return (
            f"{self.transactions} write transactions in {self.commits} commits, {self.busy_waits} busy waits"
        )


class SqliteConnection:
    """Runs compiled statements inline; a statement refused as busy is retried asynchronously."""

    __slots__ = ("_conn", "_counts", "_deadline_after")

    def __init__(self, conn: sqlite3.Connection, busy_timeout: float, counts: SqliteCounts) -> None:
        self._conn = conn
        self._deadline_after = busy_timeout
        self._counts = counts

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    async def execute(self, sql: Sql, params: Mapping[str, Any] = NO_PARAMS) -> Rows:
        compiled = sql.compiled(DIALECT)
        raw, rowcount = await self.run(compiled.sql, compiled.args(params))
        if raw is None:
            return Rows([], rowcount)
        make = compiled.row_type
        return Rows(raw if make is None else [make._make(row) for row in raw], len(raw))  # type: ignore[attr-defined]

    async def run(self, sql: str, args: Sequence[Any]) -> tuple[list[Any] | None, int]:
        """Run one compiled statement: its raw rows (None for a statement without a result) and
        its row count. Raises IntegrityViolation, DatabaseError (busy past the timeout)."""
        deadline = None
        delay = _FIRST_BACKOFF
        while True:
            try:
                cursor = self._conn.execute(sql, args)
                if cursor.description is None:
                    return None, cursor.rowcount
                return cursor.fetchall(), -1
            except sqlite3.IntegrityError as err:
                message = str(err).lower()
                raise IntegrityViolation("foreign key" in message, message) from None
            except sqlite3.Error as err:
                if not _is_busy(err):
                    raise DatabaseError(type(err).__name__) from err
                self._counts.busy_waits += 1
                deadline, delay = await _wait_busy(err, deadline, delay, self._deadline_after)

    async def execute_many(self, sql: Sql, params: Sequence[Mapping[str, Any]]) -> None:
        compiled = sql.compiled(DIALECT)
        await self.run_many(compiled.sql, [compiled.args(p) for p in params])

    async def run_many(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        """Run one compiled statement once per argument list. Raises IntegrityViolation,
        DatabaseError."""
        try:
            self._conn.executemany(sql, args)
        except sqlite3.IntegrityError as err:
            message = str(err).lower()
            raise IntegrityViolation("foreign key" in message, message) from None
        except sqlite3.Error as err:
            raise DatabaseError(type(err).__name__) from err


async def _wait_busy(
    err: sqlite3.Error, deadline: float | None, delay: float, patience: float
) -> tuple[float, float]:
    """Sleep before retrying a busy statement; DatabaseError once `patience` seconds have passed
    since the first refusal."""
    now = asyncio.get_running_loop().time()
    if deadline is None:
        deadline = now + patience
    if now >= deadline:
        raise DatabaseError(type(err).__name__) from err
    await asyncio.sleep(min(delay, deadline - now))
    return deadline, min(delay * 2, _MAX_BACKOFF)


async def _after_commit(batch: _Batch) -> None:
    """Wait for `batch`'s COMMIT, for a writer that failed after reading what earlier members of
    its group wrote: its failure (a name found taken, an object found gone) was decided on changes
    not yet durable, so it is answered only once they are. Raises DatabaseError if they never
    became durable (the failure may then describe a state that never existed: the caller retries)."""
    try:
        await asyncio.shield(batch.done)
    except Exception as err:
        raise DatabaseError("TransactionNotCommitted") from err


class _Batch:
    """One write transaction shared by the writers that joined it; `done` settles with its COMMIT."""

    __slots__ = ("done", "members", "requesters_gone")

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done
        self.members = 0  # writers whose changes it holds
        self.requesters_gone: list[Callable[[], bool]] = []  # per member: is who asked for it gone?


class SqliteDriver:
    """The registry's SQLite connections (see the module docstring)."""

    def __init__(self, path: str, *, readers: int = 4, busy_timeout: float = 10.0) -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._busy_timeout = busy_timeout
        self._readers = readers
        self._idle: list[sqlite3.Connection] = []
        self._writer: sqlite3.Connection | None = None
        self._write_lock = asyncio.Lock()  # its holder uses the writer connection
        self._waiting = 0  # writers waiting for the lock
        self._batch: _Batch | None = None  # the open write transaction
        self._takeovers: set[asyncio.Task[None]] = set()
        self._thread = CommitThread()
        self._watch = PoolWatch()
        self.counts = SqliteCounts()

    @property
    def dialect(self) -> Dialect:
        return DIALECT

    @property
    def capacity(self) -> int:
        return self._readers + 1

    def watch(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None:
        self._watch.checked_out, self._watch.checked_in = checked_out, checked_in

    async def _open(self) -> sqlite3.Connection:
        try:
            return await self._thread.run(_connect, self._path, self._busy_timeout)
        except sqlite3.Error as err:
            raise DatabaseError(type(err).__name__) from err

    @asynccontextmanager
    async def write(
        self, *, requester_gone: Callable[[], bool] | None = None
    ) -> AsyncIterator[SqliteConnection]:
        """One write transaction (see the module docstring). `requester_gone`, if given, is asked just
        before the group's COMMIT whether the one who asked for this transaction is gone (the
        registry writer's session of a worker that died after sending "commit"): then the whole
        group is rolled back and fails (DatabaseError) instead of committing a change nobody will
        be told about, which the dead worker's client could already have read as absent."""
        self._waiting += 1
        try:
            await self._write_lock.acquire()
        finally:
            self._waiting -= 1
        try:
            batch = self._batch
            if batch is None:
                if self._writer is None:
                    self._writer = await self._open()
                await self._begin_immediate(self._writer)
                batch = self._batch = _Batch(asyncio.get_running_loop().create_future())
            conn = self._writer
            assert conn is not None
            conn.execute("SAVEPOINT member")
        except sqlite3.Error as err:
            self._end_turn()
            raise DatabaseError(type(err).__name__) from err
        except BaseException:
            self._end_turn()
            raise
        self._watch.checked_out()
        try:
            yield SqliteConnection(conn, self._busy_timeout, self.counts)
        except BaseException as failure:
            self._watch.checked_in()
            self._undo_member(conn)
            read_others = batch.members > 0
            self._end_turn()
            if read_others and isinstance(failure, Exception):  # cancelled: nobody waits for an answer
                await _after_commit(batch)
            raise
        self._watch.checked_in()
        try:
            conn.execute("RELEASE member")
            batch.members += 1
            if requester_gone is not None:
                batch.requesters_gone.append(requester_gone)
        except sqlite3.Error:
            self._undo_member(conn)
        self._end_turn()
        try:
            await asyncio.shield(batch.done)
        except sqlite3.Error as err:
            if _is_full(err):
                raise DatabaseError("SQLITE_FULL") from err
            raise CommitStateUnknownError("the registry did not confirm the commit") from err

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """Undo the write transaction (no sync: its WAL frames are just dropped). A connection that
        cannot roll back is closed, so the next writer starts on a fresh one."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._writer = None
            conn.close()

    def _undo_member(self, conn: sqlite3.Connection) -> None:
        """Undo one writer's changes, keeping the others' in the open transaction. If that fails
        the whole transaction goes (`_end_turn` then fails the batch)."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK TO member")
                conn.execute("RELEASE member")
        except sqlite3.Error:
            self._roll_back(conn)

    def _end_turn(self) -> None:
        """The lock holder is done with the open transaction: hand it to a waiting writer (group
        commit: they share one COMMIT and its sync), or commit it on the commit thread (the lock is
        released when the COMMIT has finished), or, with no member left, roll it back."""
        batch, conn = self._batch, self._writer
        if batch is None:
            self._write_lock.release()
            return
        if conn is None or not conn.in_transaction:  # SQLite rolled everything back (I/O, full disk)
            self._batch = None
            settle(batch.done, DatabaseError("TransactionRolledBack"), None)
            self._write_lock.release()
            return
        if self._waiting and batch.members < MAX_GROUP:
            self._write_lock.release()
            # The woken writer runs before this callback; if it was cancelled instead, nobody
            # holds the open transaction and the callback commits it.
            asyncio.get_running_loop().call_soon(self._commit_if_abandoned, batch)
            return
        self._commit(batch, conn)

    def _commit(self, batch: _Batch, conn: sqlite3.Connection) -> None:
        self._batch = None
        if batch.members == 0 or any(gone() for gone in batch.requesters_gone):
            self._roll_back(conn)
            failure = DatabaseError("TransactionAbandoned") if batch.members else None
            settle(batch.done, failure, None)
            if failure is not None:
                batch.done.exception()  # retrieved: the member whose requester is gone waits for nobody
            self._write_lock.release()
            return
        self.counts.commits += 1
        self.counts.transactions += batch.members
        self._thread.run(_commit, conn).add_done_callback(lambda future: self._committed(batch, future))

    def _committed(self, batch: _Batch, future: asyncio.Future[None]) -> None:
        error = None if future.cancelled() else future.exception()
        settle(batch.done, error, None)
        if error is not None:
            batch.done.exception()  # retrieved: every member may have been cancelled
        self._write_lock.release()

    def _commit_if_abandoned(self, batch: _Batch) -> None:
        if self._batch is batch and not self._write_lock.locked():
            task = asyncio.get_running_loop().create_task(self._take_over(batch))
            self._takeovers.add(task)
            task.add_done_callback(self._takeovers.discard)

    async def _take_over(self, batch: _Batch) -> None:
        await self._write_lock.acquire()
        conn = self._writer
        if self._batch is not batch or conn is None:
            self._write_lock.release()
            return
        self._commit(batch, conn)

    async def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the write lock, waiting asynchronously while another connection holds it."""
        deadline = None
        delay = _FIRST_BACKOFF
        while True:
            try:
                if conn.in_transaction:  # never inherit what a failed COMMIT may have left open
                    conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as err:
                if not _is_busy(err):
                    raise DatabaseError(type(err).__name__) from err
                self.counts.busy_waits += 1
                deadline, delay = await _wait_busy(err, deadline, delay, self._busy_timeout)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[SqliteConnection]:
        # Not bounded by waiting: a read that awaits something else (or reads again, nested)
        # while holding its connection must never wait for itself. Beyond `readers` idle
        # connections, extra ones are opened and closed again.
        conn = self._idle.pop() if self._idle else await self._open()
        self._watch.checked_out()
        try:
            yield SqliteConnection(conn, self._busy_timeout, self.counts)
        finally:
            self._watch.checked_in()
            if len(self._idle) < self._readers:
                self._idle.append(conn)
            else:
                conn.close()

    async def close(self) -> None:
        async with self._write_lock:  # a commit under way finishes first
            connections = [*self._idle, *([self._writer] if self._writer is not None else [])]
            self._idle, self._writer = [], None
            for conn in connections:
                conn.close()
        self._thread.stop()
