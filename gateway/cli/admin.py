"""`cedarberg admin ...`: what operators do every day, against a running gateway over its API
(unlike `cedarberg keys`, which works offline against the key store).

    cedarberg admin namespaces create|show|grant|revoke ...   (gateway.cli.admin_namespaces)
    cedarberg admin keys create|list|rotate|revoke ...        (gateway.cli.admin_keys)
    cedarberg admin explain ... | review ...                  (gateway.cli.admin_decisions)

Every command takes `--config`, `--url`, `--ca-file`, `--key-file` and `--json`; the credential
comes from `CB_ADMIN_KEY` or `--key-file`, never from an argument (gateway.cli.admin_client).

Exit codes: 0 done; 1 the gateway refused (its status and ErrorModel message on stderr) or could
not be reached; 2 bad arguments, settings or no credential (one line on stderr).

Wiring (gateway/cli/main.py): `add_admin_commands(subparsers)` once, and
`if args.command == "admin": return run_admin_command(args)`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import TextIO

from cedarberg.gateway.cli.admin_client import (
    KEY_VARIABLE,
    AdminClient,
    AdminError,
    AdminSetupError,
    add_connection_options,
)
from cedarberg.gateway.cli.admin_decisions import (
    add_admin_decision_commands,
    run_admin_explain,
    run_admin_review,
)
from cedarberg.gateway.cli.admin_keys import add_admin_keys_commands, run_admin_keys
from cedarberg.gateway.cli.admin_namespaces import add_admin_namespace_commands, run_admin_namespaces

PROG = "cedarberg admin"


def add_admin_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `admin ...` to the `cedarberg` command line."""
    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common)
    admin = subparsers.add_parser(
        "admin",
        help="namespaces, grants, keys, explain and review on a running gateway",
        description="Operate a running gateway over its API. The admin API key comes from the "
        f"{KEY_VARIABLE} environment variable or --key-file, never from an argument (it would land "
        "in shell history).",
    )
    commands = admin.add_subparsers(dest="admin_command", required=True)
    add_admin_namespace_commands(commands, common)
    add_admin_keys_commands(commands, common)
    add_admin_decision_commands(commands, common)


def run_admin_command(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the `admin` command parsed by `add_admin_commands`; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        client = AdminClient.from_args(args, environ)
        if args.admin_command == "namespaces":
            return run_admin_namespaces(client, args, out)
        if args.admin_command == "keys":
            return run_admin_keys(client, args, out, err)
        if args.admin_command == "explain":
            return run_admin_explain(client, args, out)
        return run_admin_review(client, args, out)
    except AdminSetupError as error:
        print(f"{PROG}: {error}", file=err)
        return 2
    except AdminError as error:
        print(f"{PROG}: {error}", file=err)
        return 1
