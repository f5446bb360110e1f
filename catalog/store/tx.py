"""The transaction every store function takes: one connection inside one database transaction,
and what the transaction changed (for the read cache).

The statements themselves live beside this module, one module per table (catalog.store.namespaces,
objects, idempotency, metrics, dropped, keys, roots, plans), as free functions taking a `StoreTx`
first; a transaction comes from `Store.read` or `Store.write` (catalog.store.pool).
"""

from __future__ import annotations

import time

from cedarberg.catalog.store.cache import Touched
from cedarberg.catalog.store.driver import Connection


def now_ms() -> int:
    """The registry's timestamps: milliseconds since the epoch."""
    return int(time.time() * 1000)


class StoreTx:
    """One database transaction: its connection (which runs `Sql` statements) and `touched`,
    the names a writing function changed (forgotten from the read cache when it ends)."""

    __slots__ = ("connection", "touched")

    def __init__(self, conn: Connection) -> None:
        self.connection = conn
        self.touched = Touched()

    @property
    def dialect(self) -> str:
        """ "sqlite" or "postgresql"."""
        return str(self.connection.dialect.name)
