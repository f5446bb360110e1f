"""`cedarberg db`: the registry's schema.

    cedarberg db current     where the registry's migration history is, and whether at head
    cedarberg db upgrade     apply what is missing (safe while gateways serve: each migration runs
                             once, under a lock; take a backup first, see docs/operations.md)

Both take the settings of `serve` (--config, CEDARBERG_* variables, --data-dir, --store-url).
`db current` exits 3 when the schema is behind, so deployment scripts can test it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TextIO

from cedarberg.catalog.errors import CatalogError
from cedarberg.gateway.cli.deployment import offline_options, offline_settings

PROG = "cedarberg"
EXIT_BEHIND = 3


def add_db_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = offline_options(warehouse=False)
    db = subparsers.add_parser("db", help="registry schema: current revision, upgrade")
    commands = db.add_subparsers(dest="db_command", required=True)
    commands.add_parser("current", parents=[common], help="show the schema revision and whether at head")
    commands.add_parser("upgrade", parents=[common], help="upgrade the schema to this version's head")


def run_db_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    # Alembic and SQLAlchemy load only for `db` commands, not for the parser (`cedarberg --help`).
    import asyncio

    from cedarberg.gateway.serve.migrate import schema_state, upgrade

    out = out or sys.stdout
    err = err or sys.stderr
    settings = offline_settings(args, environ, err)
    if settings is None:
        return 2
    url = settings.effective_store_url()
    try:
        if args.db_command == "upgrade":
            before = asyncio.run(schema_state(url))
            after = asyncio.run(upgrade(url))
            change = "unchanged" if before == after else f"from {before.where()}"
            print(f"registry: {after.current} ({change})", file=out)
            return 0
        state = asyncio.run(schema_state(url))
    except CatalogError as error:
        print(f"{PROG}: {error}", file=err)
        return 1
    print(f"{state.describe()}{' (head)' if state.at_head else ''}", file=out)
    return 0 if state.at_head else EXIT_BEHIND
