"""`cedarberg db`: the registry's schema.

    cedarberg db current     where the catalog and gateway migrations are, and whether at head
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
    commands.add_parser("current", parents=[common], help="show the schema revisions and whether at head")
    commands.add_parser("upgrade", parents=[common], help="upgrade the schema to this version's head")


def run_db_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    # Alembic and SQLAlchemy load only for `db` commands, not for the parser (`cedarberg --help`).
    import asyncio

    from cedarberg.gateway.serve.migrate import schema_states, upgrade

    out = out or sys.stdout
    err = err or sys.stderr
    settings = offline_settings(args, environ, err)
    if settings is None:
        return 2
    url = settings.effective_store_url()
    try:
        if args.db_command == "upgrade":
            before = asyncio.run(schema_states(url))
            after = asyncio.run(upgrade(url))
            for old, new in zip(before, after, strict=True):
                change = "unchanged" if old.current == new.current else f"from {old.current or 'empty'}"
                print(f"{new.tree}: {new.current} ({change})", file=out)
            return 0
        states = asyncio.run(schema_states(url))
    except CatalogError as error:
        print(f"{PROG}: {error}", file=err)
        return 1
    for state in states:
        print(f"{state.describe()}{'' if not state.at_head else ' (head)'}", file=out)
    return 0 if all(state.at_head for state in states) else EXIT_BEHIND
