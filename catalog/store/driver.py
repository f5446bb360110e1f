"""What the registry asks of a database driver (catalog.store.sqlite_driver,
catalog.store.postgres_driver), and the two errors every driver maps its own exceptions to.

A driver runs compiled statements (catalog.store.statements) on connections of its own pool:
`write()` inside one transaction, committed on normal exit (an error while committing is
CommitStateUnknownError), rolled back when the body raises; `read()` in autocommit, where each
statement sees the latest committed state (READ COMMITTED on PostgreSQL, a WAL snapshot per
statement on SQLite: what the registry's reads always had).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from sqlalchemy.engine.interfaces import Dialect

from cedarberg.catalog.store.statements import NO_PARAMS, Rows, Sql


class IntegrityViolation(Exception):
    """A constraint refused the statement. `detail` (lower case: the driver's message and the
    constraint's name) tells which; it is for the store's mapping, never for clients."""

    def __init__(self, foreign_key: bool, detail: str) -> None:
        super().__init__("constraint violated")
        self.foreign_key = foreign_key
        self.detail = detail


class DatabaseError(Exception):
    """The database failed the statement (unreachable, locked past the timeout, I/O): the store
    answers StorageUnavailableError. The message is the driver's exception class only."""


class Connection(Protocol):
    """One connection, inside a write transaction or reading in autocommit."""

    @property
    def dialect(self) -> Dialect: ...

    async def execute(self, sql: Sql, params: Mapping[str, Any] = NO_PARAMS) -> Rows: ...

    async def execute_many(self, sql: Sql, params: Sequence[Mapping[str, Any]]) -> None: ...


class Driver(Protocol):
    @property
    def dialect(self) -> Dialect: ...

    @property
    def capacity(self) -> int:
        """The most connections the driver opens at once."""
        ...

    def write(self) -> AbstractAsyncContextManager[Connection]: ...

    def read(self) -> AbstractAsyncContextManager[Connection]: ...

    def watch(self, checked_out: Callable[[], None], checked_in: Callable[[], None]) -> None:
        """Call `checked_out` / `checked_in` whenever a connection is taken from / given back to
        the pool (for the pool gauge)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class CallingDriver(Protocol):
    """A driver whose common writes run whole in another process, one message each
    (catalog.store.sqlite_handoff: the SQLite writer's procedures, catalog.store.writer_calls)."""

    async def call(self, procedure: str, args: Mapping[str, Any]) -> int: ...


def _nothing() -> None:
    return None


class PoolWatch:
    """The pool gauge's callbacks (no-ops until `watch` is called)."""

    __slots__ = ("checked_in", "checked_out")

    def __init__(self) -> None:
        self.checked_out: Callable[[], None] = _nothing
        self.checked_in: Callable[[], None] = _nothing
