"""A real catalog in the test process, below the gateway: a `CatalogContext` on SQLite or
PostgreSQL (the `registry_url` fixture) with the local KEK and one warehouse, for tests that
call `catalog/` directly.

`UnconfirmedStore` is the one fake: a real store whose next write transaction (or single-statement
write, on PostgreSQL) commits and then reports `CommitStateUnknownError`, as a connection lost
while committing leaves it. `RacedStore` is a real store that runs a test's action (another
writer's request) just before its next write transaction opens: between an operation's read and
its write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cedarberg.catalog.context import CatalogContext, Limits, Warehouse
from cedarberg.catalog.errors import CommitStateUnknownError
from cedarberg.catalog.idempotency import Idempotency
from cedarberg.catalog.sealing import Sealer
from cedarberg.catalog.store.cache import Touched
from cedarberg.catalog.store.connect import open_driver
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.statements import Sql
from cedarberg.catalog.store.tx import StoreTx
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings

WAREHOUSE = "w"


class UnconfirmedStore(Store):
    """A Store whose write transactions, once `unconfirm_next` is set, commit and then raise
    CommitStateUnknownError (the transaction landed; the caller cannot know it)."""

    unconfirm_next = False

    @asynccontextmanager
    async def write(self) -> AsyncIterator[StoreTx]:
        async with super().write() as tx:
            yield tx
        if self.unconfirm_next:
            self.unconfirm_next = False
            raise CommitStateUnknownError("the registry did not confirm the commit")

    async def write_alone(self, sql: Sql, params: Mapping[str, Any], touched: Touched) -> Any:
        outcome = await super().write_alone(sql, params, touched)
        if self.unconfirm_next:
            self.unconfirm_next = False
            raise CommitStateUnknownError("the registry did not confirm the write")
        return outcome


class RacedStore(Store):
    """A Store that runs `before_next_write` (once, then forgets it) before its next write
    transaction opens: another writer lands between an operation's read and its write."""

    before_next_write: Callable[[], Awaitable[None]] | None = None

    @asynccontextmanager
    async def write(self) -> AsyncIterator[StoreTx]:
        racing, self.before_next_write = self.before_next_write, None
        if racing is not None:
            await racing()
        async with super().write() as tx:
            yield tx


@asynccontextmanager
async def catalog_context(
    tmp_path: Path,
    *,
    url: str | None = None,
    store_class: type[Store] = Store,
    limits: Limits | None = None,
    seal_files: bool = True,
) -> AsyncIterator[CatalogContext]:
    """A catalog on the registry at `url` (the `registry_url` fixture: SQLite or PostgreSQL;
    default a fresh SQLite file under `tmp_path`), with warehouse `w` at `tmp_path/warehouse`
    (sealing its files unless `seal_files` is False)."""
    url = url or f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}"
    await migrate_registry(url)
    store = store_class(open_driver(url, capacity=20))  # as `open_store` opens one
    keyring = KeyRing.open(KmsSettings(), tmp_path / "kms")
    sealer = Sealer(keyring)
    try:
        yield CatalogContext(
            store=store,
            sealer=sealer,
            warehouses={WAREHOUSE: Warehouse(WAREHOUSE, (tmp_path / "warehouse").as_uri(), seal_files, 0)},
            default_warehouse=WAREHOUSE,
            idempotency=Idempotency(store, sealer, 1800),
            limits=limits if limits is not None else Limits(),
        )
    finally:
        await keyring.aclose()
        await store.close()
