"""The `cedarberg` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from aiohttp import web

from catalog.errors import CatalogError
from gateway import config_reference
from gateway.app import create_app
from gateway.audit import SecretScrubbingFilter
from gateway.authn.tokens import TokenKeyError
from gateway.authz.cli import add_policy_commands, run_policy_command
from gateway.authz.errors import PolicyLoadError
from gateway.catalog_cli import add_catalog_commands, run_catalog_command
from gateway.keys_cli import add_keys_commands, run_keys_command
from gateway.settings import Settings, SettingsError, load_settings
from gateway.tls import PlainHttpRefusedError, TlsConfigError, check_plain_http_allowed, server_ssl_context
from kms.errors import KmsError

log = logging.getLogger("cedarberg")


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
    commands.add_parser("config-reference", help="print the configuration reference (Markdown)")
    add_policy_commands(commands)
    add_keys_commands(commands)
    add_catalog_commands(commands)
    return parser


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Defence in depth: whatever a log call is handed, secrets never reach the log.
    for handler in logging.getLogger().handlers:
        handler.addFilter(SecretScrubbingFilter())


def serve(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    ssl_context = None
    if settings.tls.enabled:
        ssl_context = server_ssl_context(settings.tls)
    else:
        check_plain_http_allowed(settings.host, settings.tls)
    app = create_app(settings)
    scheme = "https" if ssl_context else "http"
    where = f"{scheme}://{settings.host}:{settings.port}"
    log.info("serving on %s (data dir %s)", where, settings.data_dir.resolve())
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        ssl_context=ssl_context,
        print=None,
        access_log=None,
        shutdown_timeout=30,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-reference":
        print(config_reference.render(), end="")
        return 0
    if args.command == "policies":
        return run_policy_command(args)
    if args.command == "keys":
        return run_keys_command(args)
    if args.command in ("kms", "dropped", "rebuild"):
        return run_catalog_command(args)
    flags: dict[str, object] = {
        "host": args.host,
        "port": args.port,
        "data_dir": args.data_dir,
        "store_url": args.store_url,
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
    _configure_logging(settings)
    try:
        serve(settings)
    except (
        CatalogError,
        KmsError,
        TlsConfigError,
        PlainHttpRefusedError,
        PolicyLoadError,
        TokenKeyError,
    ) as err:
        print(f"cedarberg: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"cedarberg: cannot listen on {settings.host}:{settings.port}: {err.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
