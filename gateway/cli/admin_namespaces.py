"""`cedarberg admin namespaces create|show|grant|revoke`: namespaces and their grants on a running
gateway, through its Iceberg REST API (the same requests an engine would send, decided by Cedar).

Grants are the namespace properties `cedarberg.readers` and `cedarberg.writers` (comma-separated
groups; see policies/README.md):

    create NS [--readers G ...] [--writers G ...]     POST /v1/{prefix}/namespaces
    show NS                                           GET  /v1/{prefix}/namespaces/{ns}
    grant NS (--readers G | --writers G) ...          POST .../{ns}/properties (adds the groups)
    revoke NS (--readers G | --writers G) ...         POST .../{ns}/properties (removes them)

NS is dotted (`sales.eu`: namespace `eu` in `sales`); `--warehouse` names the warehouse (default:
the gateway's default one). `grant` and `revoke` read the namespace's grants and write the new
list; two operators changing the same namespace at once may overwrite each other's change (the
REST properties update has no compare-and-set), so check with `show` afterwards.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO
from urllib.parse import quote

import orjson

from cedarberg.gateway.cli.admin_client import AdminClient, AdminSetupError

READERS = "cedarberg.readers"
WRITERS = "cedarberg.writers"
_SEPARATOR = "\x1f"  # between namespace levels in a REST path (Iceberg's unit separator)


def add_admin_namespace_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    namespaces = subparsers.add_parser(
        "namespaces", help="create namespaces with grants, show them, grant and revoke groups"
    )
    commands = namespaces.add_subparsers(dest="admin_namespaces_command", required=True)
    helps = {
        "create": "create a namespace, with grants",
        "show": "show a namespace's properties and grants",
        "grant": "grant groups read (--readers) or read-write (--writers) access",
        "revoke": "take groups off a namespace's readers or writers",
    }
    for name, text in helps.items():
        command = commands.add_parser(name, parents=[common], help=text)
        command.add_argument("namespace", help="dotted namespace, e.g. sales or sales.eu")
        command.add_argument("--warehouse", help="warehouse (default: the gateway's default)")
        if name != "show":
            command.add_argument("--readers", action="append", default=[], metavar="GROUP", help="repeatable")
            command.add_argument("--writers", action="append", default=[], metavar="GROUP", help="repeatable")


def run_admin_namespaces(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    """Run one `admin namespaces` command. Raises AdminError, AdminSetupError."""
    levels = [level for level in args.namespace.split(".")]
    if not all(levels):
        raise AdminSetupError(f"not a dotted namespace: {args.namespace!r}")
    base = "/v1" + (f"/{quote(args.warehouse, safe='')}" if args.warehouse else "") + "/namespaces"
    path = f"{base}/{quote(_SEPARATOR.join(levels), safe='')}"
    command = args.admin_namespaces_command
    if command == "create":
        properties = {k: ",".join(v) for k, v in ((READERS, args.readers), (WRITERS, args.writers)) if v}
        answer = client.call("POST", base, {"namespace": levels, "properties": properties})
        return _show(answer, args, out, "created")
    if command == "show":
        return _show(client.call("GET", path), args, out, "namespace")
    if not args.readers and not args.writers:
        raise AdminSetupError(f"{command}: give --readers GROUP or --writers GROUP")
    current = client.call("GET", path).get("properties", {})
    updates: dict[str, str] = {}
    removals: list[str] = []
    for key, groups in ((READERS, args.readers), (WRITERS, args.writers)):
        if not groups:
            continue
        listed = _groups(current.get(key, ""))
        changed = (
            [*listed, *(g for g in groups if g not in listed)]
            if command == "grant"
            else [g for g in listed if g not in groups]
        )
        if changed:
            updates[key] = ",".join(changed)
        elif key in current:
            removals.append(key)
    client.call("POST", f"{path}/properties", {"removals": removals, "updates": updates})
    return _show(client.call("GET", path), args, out, "granted" if command == "grant" else "revoked")


def _groups(value: str) -> list[str]:
    return [g.strip() for g in value.split(",") if g.strip()]


def _show(answer: dict[str, Any], args: argparse.Namespace, out: TextIO, verb: str) -> int:
    if args.json:
        out.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    properties: dict[str, str] = answer.get("properties", {})
    print(f"{verb}: {'.'.join(answer['namespace'])}", file=out)
    print(f"  readers: {', '.join(_groups(properties.get(READERS, ''))) or '(none)'}", file=out)
    print(f"  writers: {', '.join(_groups(properties.get(WRITERS, ''))) or '(none)'}", file=out)
    for key in sorted(set(properties) - {READERS, WRITERS}):
        print(f"  {key} = {properties[key]}", file=out)
    return 0
