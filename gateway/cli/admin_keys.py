"""`cedarberg admin keys create|list|rotate|revoke`: API keys through a running gateway's admin API
(`/admin/v1/api-keys`), as an admin (see `gateway.cli.admin_client` for URL, CA and credential).

    create (--person NAME | --service NAME | --principal NAME --kind user|service)
           [--group G ...] [--expires-in-days N] [--description TEXT]
        prints the new key alone on stdout (a status line saying whom it is for goes to stderr)
    list [--principal NAME]                    every key, page by page (never secrets)
    rotate KEY_ID [--overlap 1h]               prints the new key on stdout; with --overlap the
                                               old secret keeps working that long (at most
                                               `api_keys.max_rotation_overlap_seconds`), else it
                                               stops at once
    revoke KEY_ID                              ends the key (both secrets, during an overlap)
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import orjson

from cedarberg.gateway.cli.admin_client import AdminClient, AdminSetupError
from cedarberg.gateway.cli.key_owner import MAX_EXPIRY_DAYS, add_key_owner_options, key_owner

API_KEYS = "/admin/v1/api-keys"
_PAGE = 500
_DURATION = re.compile(r"(\d{1,9})([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def duration(text: str) -> int:
    """Seconds in `90`, `90s`, `15m`, `1h` or `1d` (argparse type)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration (like 90s, 15m, 1h): {text!r}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _expiry_days(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= MAX_EXPIRY_DAYS:
        raise argparse.ArgumentTypeError(f"must be a whole number of days from 1 to {MAX_EXPIRY_DAYS}")
    return int(value)


def add_admin_keys_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    keys = subparsers.add_parser("keys", help="create, list, rotate and revoke API keys on a running gateway")
    commands = keys.add_subparsers(dest="admin_keys_command", required=True)
    create = commands.add_parser("create", parents=[common], help="create a key; prints it once on stdout")
    add_key_owner_options(create)
    create.add_argument("--group", action="append", default=[], help="a group of the principal (repeatable)")
    create.add_argument("--expires-in-days", type=_expiry_days, help="expire the key after N days")
    create.add_argument("--description", default="", help="a note shown in listings")
    listing = commands.add_parser("list", parents=[common], help="list keys (never secrets)")
    listing.add_argument("--principal", help="only keys of this principal")
    rotate = commands.add_parser("rotate", parents=[common], help="give a key a new secret; prints it once")
    rotate.add_argument("key_id", help="the key id (the part after 'cbk_', 16 characters)")
    rotate.add_argument(
        "--overlap",
        type=duration,
        default=0,
        help="how long the old secret keeps working (90s, 15m, 1h; default 0: it stops at once)",
    )
    revoke = commands.add_parser("revoke", parents=[common], help="revoke a key (both secrets at once)")
    revoke.add_argument("key_id", help="the key id")


def run_admin_keys(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run one `admin keys` command. Raises AdminError, AdminSetupError."""
    command = args.admin_keys_command
    if command == "create":
        return _create(client, args, out, err)
    if command == "list":
        return _list(client, args, out)
    if command == "rotate":
        answer = client.call("POST", f"{API_KEYS}/{args.key_id}/rotate", {"overlap_seconds": args.overlap})
        if args.json:
            return _print_json(answer, out)
        until = answer.get("previous_secret_expires_at")
        ending = f"the old secret works until {until}" if until else "the old secret stopped working"
        print(f"rotated API key {answer['id']} ({answer['summary']}); {ending}", file=err)
        print(answer["key"], file=out, flush=True)
        return 0
    answer = client.call("DELETE", f"{API_KEYS}/{args.key_id}")
    if args.json:
        return _print_json(answer, out)
    print(f"revoked API key {answer['id']} at {answer['revoked_at']}", file=out)
    return 0


def _create(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        principal, kind = key_owner(args)
    except ValueError as error:
        raise AdminSetupError(str(error)) from None
    body: dict[str, Any] = {
        "principal": principal,
        "kind": kind.value,
        "groups": args.group,
        "description": args.description,
    }
    if args.expires_in_days is not None:
        body["expires_at"] = (datetime.now(UTC) + timedelta(days=args.expires_in_days)).isoformat()
    answer = client.call("POST", API_KEYS, body)
    if args.json:
        return _print_json(answer, out)
    groups = ",".join(answer["groups"]) or "none"
    print(f"created API key {answer['id']}: {answer['summary']} (groups: {groups})", file=err)
    print(answer["key"], file=out, flush=True)
    return 0


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    records: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query = [("pageSize", str(_PAGE))]
        if args.principal:
            query.append(("principal", args.principal))
        if token:
            query.append(("pageToken", token))
        page = client.call("GET", API_KEYS, query=query)
        records.extend(page["api-keys"])
        token = page.get("next-page-token")
        if not token:
            break
    if args.json:
        return _print_json({"api-keys": records}, out)
    rows = [("ID", "PRINCIPAL", "FOR", "GROUPS", "EXPIRES", "STATUS")]
    for r in records:
        kind = "service" if r["kind"] == "service" else "person"
        rows.append(
            (r["id"], r["principal"], kind, ",".join(r["groups"]) or "-", r["expires_at"] or "-", _status(r))
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out
        )
    return 0


def _status(record: dict[str, Any]) -> str:
    now = datetime.now(UTC)

    def passed(value: str | None) -> bool:
        return value is not None and datetime.fromisoformat(value) <= now

    if record["revoked_at"]:
        return "revoked"
    if passed(record["expires_at"]):
        return "expired"
    old = record.get("previous_secret_expires_at")
    return "active" if old is None or passed(old) else f"active (old secret until {old})"


def _print_json(document: Any, out: TextIO) -> int:
    out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0
