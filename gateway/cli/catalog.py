"""Offline catalog maintenance commands: `kms`, `dropped`, `rebuild`.

They work on the registry and the KMS directly (the same settings as `serve`), so they also run
while no gateway serves, and are safe while one does:

    cedarberg kms status                 current KEK, its version, keys not yet under it
    cedarberg kms rotate                 rewrap every data key under the current KEK version
    cedarberg kms new-local-version      add a version to a local:// KEK and make it current
    cedarberg dropped list               soft-deleted tables and views, with drop ids (and failed
                                         purge attempts: how many, the next, the last error)
    cedarberg dropped undrop DROP_ID     restore one
    cedarberg rebuild                    restore a warehouse's tables and views from its sealed files
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from cedarberg.catalog.errors import CatalogError
from cedarberg.gateway.cli.deployment import offline_options, offline_settings
from cedarberg.kms.errors import KmsError

# The catalog (pyiceberg, pyarrow, SQLAlchemy) and the settings (pydantic) are imported by the
# commands that use them: `offline_options` and the parsers serve every command, `--help` included.
if TYPE_CHECKING:
    from cedarberg.catalog.context import CatalogContext
    from cedarberg.gateway.config.settings import Settings

PROG = "cedarberg"


def add_catalog_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = offline_options()
    kms = subparsers.add_parser("kms", help="key encryption keys: status, rotation")
    kms_commands = kms.add_subparsers(dest="kms_command", required=True)
    kms_commands.add_parser("status", parents=[common], help="current KEK and keys behind it")
    kms_commands.add_parser("rotate", parents=[common], help="rewrap all data keys under the current KEK")
    kms_commands.add_parser(
        "new-local-version", parents=[common], help="add a new version to the local:// KEK"
    )
    dropped = subparsers.add_parser("dropped", help="soft-deleted tables and views")
    dropped_commands = dropped.add_subparsers(dest="dropped_command", required=True)
    dropped_commands.add_parser("list", parents=[common], help="list soft-deleted objects")
    restore = dropped_commands.add_parser("undrop", parents=[common], help="restore a soft-deleted object")
    restore.add_argument("drop_id", help="drop id from `cedarberg dropped list`")
    subparsers.add_parser(
        "rebuild", parents=[common], help="restore the registry of a warehouse from its sealed files"
    )


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _with_catalog(settings: Settings, work: Callable[[CatalogContext], Awaitable[int]]) -> int:
    from cedarberg.gateway.catalog_setup import close_catalog, open_catalog

    ctx = await open_catalog(settings)
    try:
        return await work(ctx)
    finally:
        await close_catalog(ctx)


async def _kms_status(ctx: CatalogContext, out: TextIO) -> int:
    from cedarberg.catalog.store import keys as key_rows  # SQLAlchemy: not for `--help` (see above)

    version = await ctx.sealer.current_kek_version()
    async with ctx.store.read() as tx:
        behind = await key_rows.count_keys_not_under(tx, ctx.sealer.keyring.kek_uri, version)
    print(f"kek: {ctx.sealer.keyring.kek_uri}\nversion: {version}\nkeys not under it: {behind}", file=out)
    return 0


async def _kms_rotate(ctx: CatalogContext, out: TextIO) -> int:
    from cedarberg.catalog.rotation import rotate

    report = await rotate(ctx, progress=lambda done: print(f"rewrapped {done}", file=out, flush=True))
    print(
        f"rotation to {report.kek_uri} version {report.kek_version}: {report.rewrapped} rewrapped, "
        f"{report.remaining} remaining",
        file=out,
    )
    return 0 if report.remaining == 0 else 1


def _new_local_version(settings: Settings, out: TextIO, err: TextIO) -> int:
    from cedarberg.kms.providers.local import add_key_version, key_file_for

    if not settings.kms.kek.startswith("local://"):
        print(f"{PROG} kms new-local-version: the KEK is not a local:// key", file=err)
        return 2
    version = add_key_version(key_file_for(settings.kms.kek, settings.effective_local_key_dir()))
    print(f"local KEK {settings.kms.kek} is now at version {version}; run `cedarberg kms rotate`", file=out)
    return 0


async def _dropped_list(ctx: CatalogContext, warehouse: str | None, out: TextIO) -> int:
    from cedarberg.catalog.dropped import list_dropped
    from cedarberg.catalog.pagination import PageRequest

    token = None
    while True:
        page = PageRequest.parse(token, "100", 100, 100)
        document = orjson.loads(await list_dropped(ctx, warehouse, page))
        for item in document["dropped"]:
            name = ".".join([*item["namespace"], item["name"]])
            print(
                f"{item['drop-id']}  {item['kind']:5}  {name}  dropped {_when(item['dropped-at-ms'])}  "
                f"purge after {_when(item['purge-after-ms'])}{_purge_state(item)}",
                file=out,
            )
        token = document.get("next-page-token")
        if not token:
            return 0


def _purge_state(item: Mapping[str, Any]) -> str:
    """Purge attempts of a listed object, if any: how many, the next one, why the last failed."""
    attempts = item.get("purge-attempts", 0)
    if not attempts:
        return ""
    state = f"  purge attempts {attempts}, next {_when(item['next-purge-attempt-ms'])}"
    if item.get("last-purge-error"):
        state += f", last error: {item['last-purge-error']}"
    return state


async def _undrop(ctx: CatalogContext, warehouse: str | None, drop_id: str, out: TextIO) -> int:
    from cedarberg.catalog.dropped import undrop

    body = await undrop(ctx, warehouse, drop_id, None)
    item = orjson.loads(body or b"{}")
    print(f"restored {item['kind']} {'.'.join([*item['namespace'], item['name']])}", file=out)
    return 0


async def _rebuild(ctx: CatalogContext, warehouse: str | None, out: TextIO) -> int:
    from cedarberg.catalog.rebuild import rebuild

    report = await rebuild(ctx, warehouse)
    for line in report.namespaces_created:
        print(f"namespace created: {line}", file=out)
    for line in report.restored:
        print(f"restored: {line}", file=out)
    for line in report.skipped:
        print(f"skipped: {line}", file=out)
    print(f"{len(report.restored)} restored, {len(report.skipped)} skipped", file=out)
    return 0


def run_catalog_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    import asyncio

    out = out or sys.stdout
    err = err or sys.stderr
    settings = offline_settings(args, environ, err)
    if settings is None:
        return 2
    warehouse = args.warehouse
    try:
        if args.command == "kms" and args.kms_command == "new-local-version":
            return _new_local_version(settings, out, err)
        if args.command == "kms":
            work: Callable[[CatalogContext], Awaitable[int]] = (
                (lambda ctx: _kms_status(ctx, out))
                if args.kms_command == "status"
                else (lambda ctx: _kms_rotate(ctx, out))
            )
        elif args.command == "dropped" and args.dropped_command == "list":
            work = lambda ctx: _dropped_list(ctx, warehouse, out)  # noqa: E731
        elif args.command == "dropped":
            work = lambda ctx: _undrop(ctx, warehouse, args.drop_id, out)  # noqa: E731
        else:
            work = lambda ctx: _rebuild(ctx, warehouse, out)  # noqa: E731
        return asyncio.run(_with_catalog(settings, work))
    except (CatalogError, KmsError) as error:
        print(f"{PROG}: {error}", file=err)
        return 1
    except OSError as error:
        print(f"{PROG}: {error.strerror or error}", file=err)
        return 1
