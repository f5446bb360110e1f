"""The `cedarberg` command line.

Start-up is part of the interface: `cedarberg --help` imports argparse and the parsers' own
modules only, and each command imports what it runs inside its branch of `main` (the server, the
catalog with pyiceberg, pyarrow and SQLAlchemy, only for the commands that use them).
`tests/gateway/test_cli_startup.py` keeps the heavy libraries out of the light commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cedarberg.gateway.authz.cli import add_policy_commands
from cedarberg.gateway.cli.admin import add_admin_commands, run_admin_command
from cedarberg.gateway.cli.catalog import add_catalog_commands, run_catalog_command
from cedarberg.gateway.cli.db import add_db_commands, run_db_command
from cedarberg.gateway.cli.deployment import offline_options
from cedarberg.gateway.cli.keys import add_keys_commands, run_keys_command


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
    admin_openapi = commands.add_parser(
        "admin-openapi", help="print the admin API's OpenAPI 3.1 document (JSON) or its reference (Markdown)"
    )
    admin_openapi.add_argument("--format", choices=("json", "markdown"), default="json")
    add_policy_commands(
        commands,
        config_parents=[offline_options(warehouse=False, store=False)],
        deployment_parents=[offline_options(warehouse=False)],
    )
    add_keys_commands(commands)
    add_catalog_commands(commands)
    add_db_commands(commands)
    add_admin_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-reference":
        from cedarberg.gateway.config import reference as config_reference

        print(config_reference.render(), end="")
        return 0
    if args.command == "admin-openapi":
        from cedarberg.gateway.cli.openapi import run_admin_openapi_command

        return run_admin_openapi_command(args.format)
    if args.command == "policies" and args.policies_command == "review":
        from cedarberg.gateway.cli.review import run_review_command

        return run_review_command(args)
    if args.command == "policies":
        from cedarberg.gateway.cli.policies import run_policies_command

        return run_policies_command(args)
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
    # `serve` imports the whole server here, once at start-up: requests never import.
    from cedarberg.gateway.config.settings import SettingsError, load_settings
    from cedarberg.gateway.logs import configure_logging
    from cedarberg.gateway.serve.fatal import report_fatal
    from cedarberg.gateway.serve.server import serve

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
