"""`cedarberg keys create|list|revoke`: manage API keys offline, directly against the key store.

    cedarberg keys create (--person NAME | --service NAME | --principal NAME --kind user|service)
                          [--group G ...] [--expires-in-days N] [--description TEXT]
                          [--engine-forms | --no-engine-forms] [--url URL]
                          [--data-dir D] [--store-url U] [--config F]
        prints the new key as the first line on stdout (a status line goes to stderr); then, on a
        terminal or with --engine-forms, the forms engines take: `credential=<id>:<secret>`
        (Spark's `spark.sql.catalog.X.credential`, pyiceberg's `credential`) and DuckDB's
        `CREATE SECRET`, pointed at --url (default: the gateway's own address from its settings).
        Piped or captured without --engine-forms, stdout is the key alone, one line, as scripts
        (`KEY=$(cedarberg keys create ...)`) expect; the secret never goes to stderr. The operator
        says whom the key is for (a person or a service); the status line repeats it in words.
    cedarberg keys list [--principal NAME] [--json]       records only: never secrets or hashes
    cedarberg keys revoke KEY_ID

Settings come from the same sources as `cedarberg serve`, in the same order (config file, then
`CEDARBERG_*` environment variables, then flags), so the command finds the store the server uses.
It works while a server runs on that store: SQLite runs in WAL mode with a busy timeout and writers
take the write lock up front (see `gateway.authn.key_store`). `keys list` reads an existing SQLite
store read-only with `sqlite3` (`gateway.authn.key_listing`: no SQLAlchemy, no migrations), to
start in a fraction of a second; other stores, and one not yet created, through the key store.
A revocation or rotation reaches every running gateway process through the key change feed within
`api_keys.change_poll_seconds`.

`create` and `revoke` append a record naming the key id (never the secret) to the audit log file
the gateway writes (`audit.destination`), opened before anything changes (`gateway.cli.key_audit`).

Exit codes: 0 done; 1 the store is unavailable or the key does not exist; 2 bad settings or
arguments (one line on stderr). Nothing secret is logged or printed except the created key (and
its engine forms, on stdout).

Wiring (gateway/cli/main.py): `add_keys_commands(subparsers)` once, and
`if args.command == "keys": return run_keys_command(args)`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import orjson

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.gateway.authn.key_format import is_key_id, parse_api_key
from cedarberg.gateway.cli.key_owner import MAX_EXPIRY_DAYS, add_key_owner_options, key_owner

# The settings (pydantic) and the key store (SQLAlchemy) are imported by the commands that use
# them: building the parser (`cedarberg --help`) must not pay for them.
if TYPE_CHECKING:
    from cedarberg.gateway.authn.key_record import ApiKeyRecord
    from cedarberg.gateway.config.settings import Settings

COMMAND = "keys"
PROG = "cedarberg"
_PAGE = 500


class _UsageError(Exception):
    """Bad input: exit 2 with the message."""


def _days(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of days: {value!r}") from None
    if not 1 <= days <= MAX_EXPIRY_DAYS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_EXPIRY_DAYS}")
    return days


def _store_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, help="TOML configuration file (as for serve)")
    common.add_argument("--data-dir", type=Path, help="directory for embedded state (as for serve)")
    common.add_argument("--store-url", help="SQLAlchemy URL of the store (as for serve)")
    return common


def add_keys_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `keys create|list|revoke` to the `cedarberg` command line."""
    common = _store_options()
    keys = subparsers.add_parser(COMMAND, help="create, list and revoke API keys offline")
    commands = keys.add_subparsers(dest="keys_command", required=True)
    create = commands.add_parser(
        "create", parents=[common], help="create a key and print it (only it) on stdout"
    )
    add_key_owner_options(create)
    create.add_argument("--group", action="append", default=[], help="a group of the principal (repeatable)")
    create.add_argument("--expires-in-days", type=_days, help="expire the key after N days")
    create.add_argument("--description", default="", help="a note shown in listings")
    create.add_argument(
        "--engine-forms",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after the key, print it as engines take it (Spark/pyiceberg credential, DuckDB secret); "
        "default: only when stdout is a terminal",
    )
    create.add_argument("--url", help="gateway URL in the engine forms (default: from the settings)")
    listing = commands.add_parser("list", parents=[common], help="list keys (never secrets)")
    listing.add_argument("--principal", help="only keys of this principal")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    revoke = commands.add_parser("revoke", parents=[common], help="revoke a key")
    revoke.add_argument("key_id", help="the key id (the part after 'cbk_', 16 characters)")


def _settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    from cedarberg.gateway.config.settings import load_settings

    flags = {"data_dir": args.data_dir, "store_url": args.store_url}
    return load_settings(args.config, environ, flags)


def _status(record: ApiKeyRecord, now: datetime) -> str:
    if record.revoked_at is not None:
        return "revoked"
    if record.is_expired(now):
        return "expired"
    return "active"


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def engine_forms(key_id: str, secret: str, url: str) -> list[str]:
    """The created key as engines take it: OAuth2 client credentials (`client_id` = key id,
    `client_secret` = key secret) for Spark, pyiceberg and DuckDB."""
    url = url.rstrip("/")
    return [
        "# Spark (spark.sql.catalog.<name>.credential) and pyiceberg (credential):",
        f"credential={key_id}:{secret}",
        "# DuckDB:",
        f"CREATE SECRET cedarberg (TYPE iceberg, CLIENT_ID '{key_id}', CLIENT_SECRET '{secret}', "
        f"OAUTH2_SERVER_URI '{url}/v1/oauth/tokens');",
        f"ATTACH 'default' AS lake (TYPE iceberg, ENDPOINT '{url}', SECRET cedarberg);",
    ]


def _wants_forms(args: argparse.Namespace, out: TextIO) -> bool:
    if args.engine_forms is not None:
        return bool(args.engine_forms)
    isatty = getattr(out, "isatty", None)
    return bool(isatty is not None and isatty())


async def _create(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator, InvalidApiKeyRequestError
    from cedarberg.gateway.authn.key_store import open_key_store
    from cedarberg.gateway.cli.key_audit import KeyAudit

    try:
        principal, kind = key_owner(args)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    expires_at = None
    if args.expires_in_days is not None:
        expires_at = datetime.now(UTC) + timedelta(days=args.expires_in_days)
    with KeyAudit.open(settings) as audit:
        store = await open_key_store(settings.effective_store_url())
        try:
            keys = ApiKeyAuthenticator(store, settings.api_keys)
            try:
                record, plaintext = await keys.create_key(
                    principal, kind, args.group, expires_at, args.description
                )
            except InvalidApiKeyRequestError as error:
                raise _UsageError(str(error)) from None
        finally:
            await store.close()
        audit.key_changed("createApiKey", record.key_id, record.principal_id)
    groups = ",".join(record.groups) or "none"
    print(
        f"created API key {record.key_id}: {record.summary} "
        f"(groups: {groups}; expires: {_when(record.expires_at)})",
        file=err,
    )
    print(plaintext, file=out, flush=True)
    if _wants_forms(args, out):
        parsed = parse_api_key(plaintext)
        from cedarberg.gateway.cli.admin_client import gateway_url

        url = args.url or gateway_url(settings)
        print("\n".join(engine_forms(parsed.key_id, parsed.secret, url)), file=out, flush=True)
    return 0


async def _stored_records(settings: Settings, principal: str | None) -> list[ApiKeyRecord]:
    from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
    from cedarberg.gateway.authn.key_store import open_key_store

    store = await open_key_store(settings.effective_store_url())
    try:
        keys = ApiKeyAuthenticator(store, settings.api_keys)
        records: list[ApiKeyRecord] = []
        after: str | None = None
        while True:
            page = await keys.list_keys(principal=principal, after=after, limit=_PAGE)
            records.extend(page)
            if len(page) < _PAGE:
                return records
            after = page[-1].key_id
    finally:
        await store.close()


def _list(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    from cedarberg.gateway.authn.key_listing import list_sqlite_keys

    # An existing SQLite store is read without SQLAlchemy (`key_listing`: start-up in a fraction
    # of a second); any other store, or one not yet created or migrated, through the key store.
    records = list_sqlite_keys(settings.effective_store_url(), args.principal)
    if records is None:
        import asyncio

        records = asyncio.run(_stored_records(settings, args.principal))
    now = datetime.now(UTC)
    if args.json:
        for record in records:
            line = {**record.to_json(), "status": _status(record, now)}
            out.write(orjson.dumps(line).decode() + "\n")
        return 0
    rows = [("ID", "PRINCIPAL", "KIND", "GROUPS", "CREATED", "EXPIRES", "STATUS")]
    rows += [
        (
            r.key_id,
            r.principal,
            r.kind.value,
            ",".join(r.groups) or "-",
            _when(r.created_at),
            _when(r.expires_at),
            _status(r, now),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        out.write("\n")
    return 0


async def _revoke(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator, NoSuchApiKeyError
    from cedarberg.gateway.authn.key_store import open_key_store
    from cedarberg.gateway.cli.key_audit import KeyAudit

    key_id: str = args.key_id
    if not is_key_id(key_id):
        raise _UsageError("not a key id (16 characters a-z and 2-7, the part after 'cbk_')")
    with KeyAudit.open(settings) as audit:
        store = await open_key_store(settings.effective_store_url())
        try:
            keys = ApiKeyAuthenticator(store, settings.api_keys)
            try:
                before = await keys.get_key(key_id)
                record = await keys.revoke_key(key_id)
            except NoSuchApiKeyError:
                print(f"{PROG}: no API key {key_id}", file=err)
                return 1
        finally:
            await store.close()
        if before.revoked_at is None:
            audit.key_changed("revokeApiKey", key_id, record.principal_id)
    if before.revoked_at is not None:
        print(f"API key {key_id} was already revoked at {_when(before.revoked_at)}", file=out)
    else:
        print(f"revoked API key {key_id} at {_when(record.revoked_at)}", file=out)
    return 0


def run_keys_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the `keys` sub-command parsed by `add_keys_commands`; returns the exit code.

    `environ` defaults to the process environment (as for `serve`); `out`/`err` to stdout/stderr.
    """
    from cedarberg.gateway.config.settings import SettingsError

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        settings = _settings(args, os.environ if environ is None else environ)
    except SettingsError as error:
        print(f"{PROG}: {error}", file=err)
        return 2
    try:
        if args.keys_command == "list":  # without asyncio when it can (`_list`)
            return _list(settings, args, out)
        import asyncio

        if args.keys_command == "create":
            return asyncio.run(_create(settings, args, out, err))
        return asyncio.run(_revoke(settings, args, out, err))
    except _UsageError as error:
        print(f"{PROG} keys {args.keys_command}: {error}", file=err)
        return 2
    except StorageUnavailableError as error:
        print(f"{PROG}: {error}", file=err)
        return 1
    except OSError as error:  # e.g. a data directory that cannot be created
        print(f"{PROG}: cannot open the key store: {error.strerror or error}", file=err)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """`cedarberg keys ...` on its own (the same commands `gateway.cli` offers)."""
    parser = argparse.ArgumentParser(prog=PROG, description="Manage Cedarberg API keys offline")
    add_keys_commands(parser.add_subparsers(dest="command", required=True))
    return run_keys_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
