"""Round trips and WAL flushes per write on a durable PostgreSQL, for the registry's two write
paths: a transaction of several statements, and one statement per write (catalog.store.server_writes).

    python -m bench.pg_writes                                        # the server's defaults
    python -m bench.pg_writes --setting commit_delay=200 --setting commit_siblings=2

For each path it runs, in process (`TableService.commit`, `NamespaceService.create`, local KEK,
sealed files), sequential commits on one table, 8 writers on 8 tables, namespace creations
sequential and by 8 clients, and prints per operation: statements asyncpg sent (each a round trip
once prepared), `pg_stat_wal.wal_sync` and `wal_write`, and `pg_stat_database.xact_commit`. These
are counts, not timings: they hold on a loaded machine. The server is a fresh
`PostgresServer(durable=True)` (fsync, synchronous_commit and full_page_writes on), as the bench
suite starts it.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg

from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.tables import TableService
from tests.support.catalogs import catalog_context
from tests.support.postgres import PostgresServer, database_name

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
SCENARIOS = (  # (name, concurrent writers, operations per writer, what they do)
    ("commits, sequential", 1, 200, "commit"),
    ("commits, 8 writers on 8 tables", 8, 60, "commit"),
    ("namespace creations, sequential", 1, 200, "namespace"),
    ("namespace creations, 8 clients", 8, 60, "namespace"),
)
_SENT = [0]


def _counting(original: Callable[..., Any]) -> Callable[..., Any]:
    def counted(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        _SENT[0] += 1
        return original(self, query, *args, **kwargs)

    return counted


def count_statements() -> None:
    """Count every statement asyncpg sends from now on (in `_SENT`)."""
    connection = asyncpg.connection.Connection
    for method in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        setattr(connection, method, _counting(getattr(connection, method)))


async def allow(_effects: Any) -> None:
    """A gate that allows everything."""


def server_counters(server: PostgresServer, database: str) -> list[int]:
    """wal_sync, wal_write (the cluster's) and xact_commit (the database's)."""
    wal = server.psql("SELECT wal_sync, wal_write FROM pg_stat_wal", database=database)
    commits = server.psql(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()", database=database
    )
    return [int(value) for value in wal.replace("|", " ").split()] + [int(commits.strip())]


async def _operation(ctx: CatalogContext, kind: str, parent: Namespace, writer: int, n: int) -> None:
    if kind == "commit":
        body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"n": str(n)}}]}
        table = Identifier.of(parent, f"t{writer}")
        await TableService(ctx).commit(None, table, req.parse(req.CommitTableRequest, body), None, allow)
    else:
        await NamespaceService(ctx).create(None, Namespace.of([*parent.levels, f"c{writer}_{n}"]), {}, None)


async def scenario(
    server: PostgresServer, url: str, tmp: Path, path: str, row: tuple[str, int, int, str]
) -> None:
    name, writers, per_writer, kind = row
    parent = Namespace.of([f"{path}-{name}".replace(" ", "_").replace(",", "")])
    async with catalog_context(tmp, url=url) as ctx:
        await NamespaceService(ctx).create(None, parent, {}, None)
        for writer in range(writers if kind == "commit" else 0):
            create = req.parse(req.CreateTableRequest, {"name": f"t{writer}", "schema": SCHEMA})
            await TableService(ctx).create(None, parent, create, None, allow)
    await asyncio.sleep(1.2)  # closed connections have reported their statistics
    database = database_name(url)
    before, sent = server_counters(server, database), _SENT[0]
    async with catalog_context(tmp, url=url) as ctx:
        ctx.store.writes_alone = path == "one statement"

        async def run_writer(index: int) -> None:
            for n in range(per_writer):
                await _operation(ctx, kind, parent, index, n)

        await asyncio.gather(*(run_writer(index) for index in range(writers)))
    sent = _SENT[0] - sent
    await asyncio.sleep(1.2)
    after = server_counters(server, database)
    ops = writers * per_writer
    wal_sync, wal_write, xact_commit = (b - a for a, b in zip(before, after, strict=True))
    print(
        f"{path:14} | {name:32} | {sent / ops:5.2f} statements | {wal_sync / ops:5.3f} wal_sync"
        f" | {wal_write / ops:5.3f} wal_write | {xact_commit / ops:5.2f} xact_commit  (per operation, {ops})",
        flush=True,
    )


async def main(settings: list[str]) -> None:
    count_statements()
    server = PostgresServer(durable=True)
    server.start()
    try:
        for setting in settings:
            server.psql(f"ALTER SYSTEM SET {setting}")
        server.psql("SELECT pg_reload_conf()")
        url = server.migrated_database()
        with tempfile.TemporaryDirectory() as tmp:
            for path in ("transaction", "one statement"):
                for row in SCENARIOS:
                    await scenario(server, url, Path(tmp), path, row)
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", action="append", default=[], help="NAME=VALUE for ALTER SYSTEM")
    asyncio.run(main(parser.parse_args().setting))
