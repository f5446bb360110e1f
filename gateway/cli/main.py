"""The `cedarberg` command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cedarberg.gateway.authz.cli import add_policy_commands, run_policy_command
from cedarberg.gateway.cli.admin import add_admin_commands, run_admin_command
from cedarberg.gateway.cli.catalog import add_catalog_commands, offline_options, run_catalog_command
from cedarberg.gateway.cli.db import add_db_commands, run_db_command
from cedarberg.gateway.cli.keys import add_keys_commands, run_keys_command
from cedarberg.gateway.cli.review import run_review_command
from cedarberg.gateway.config import reference as config_reference
from cedarberg.gateway.config.settings import SettingsError, load_settings
from cedarberg.gateway.logs import configure_logging
from cedarberg.gateway.serve.fatal import report_fatal
from cedarberg.gateway.serve.server import serve


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cedarberg", description="Policy-first Iceberg REST catalog gateway"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the catalog gateway")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8181)")
    serve.add_argument("--data-dir", type=Path, help="directory for embedded state (default ./.cedarberg)")
    serve.add_argument("--store-url", help="SQLAlchemy URL of the registry (default: SQLite in the data dir)")
    serve.add_argument("--tls-cert", type=Path, help="PEM server certificate chain (turns TLS on)")
    serve.add_argument("--tls-key", type=Path, help="PEM private key of the server certificate")
    serve.add_argument("--workers", type=int, help="server processes sharing the port (default 1)")
    commands.add_parser("config-reference", help="print the configuration reference (Markdown)")
    add_policy_commands(commands, review_parents=[offline_options(warehouse=False)])
    add_keys_commands(commands)
    add_catalog_commands(commands)
    add_db_commands(commands)
    add_admin_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-reference":
        print(config_reference.render(), end="")
        return 0
    if args.command == "policies" and args.policies_command == "review":
        return run_review_command(args)
    if args.command == "policies":
        return run_policy_command(args)
    if args.command == "keys":
        return run_keys_command(args)
    if args.command in ("kms", "dropped", "rebuild"):
        return run_catalog_command(args)
    if args.command == "db":
        return run_db_command(args)
    if args.command == "admin":
        return run_admin_command(args)
    flags: dict[str, object] = {
        "host": args.host,
        "port": args.port,
        "data_dir": args.data_dir,
        "store_url": args.store_url,
        "workers": args.workers,
    }
    tls_flags = {
        key: value for key, value in (("cert_file", args.tls_cert), ("key_file", args.tls_key)) if value
    }
    if tls_flags:
        flags["tls"] = tls_flags
    try:
        settings = load_settings(args.config, os.environ, flags)
    except SettingsError as err:
        print(f"cedarberg: {err}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    try:
        return serve(settings)
    except Exception as err:  # report_fatal re-raises what is not a setup error
        return report_fatal(err, settings)
