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
from gateway.settings import Settings, SettingsError, load_settings

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
    commands.add_parser("config-reference", help="print the configuration reference (Markdown)")
    return parser


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def serve(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app = create_app(settings)
    log.info(
        "serving on http://%s:%d (data dir %s)", settings.host, settings.port, settings.data_dir.resolve()
    )
    web.run_app(app, host=settings.host, port=settings.port, print=None, access_log=None, shutdown_timeout=30)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-reference":
        print(config_reference.render(), end="")
        return 0
    flags = {"host": args.host, "port": args.port, "data_dir": args.data_dir, "store_url": args.store_url}
    try:
        settings = load_settings(args.config, os.environ, flags)
    except SettingsError as err:
        print(f"cedarberg: {err}", file=sys.stderr)
        return 2
    _configure_logging(settings)
    try:
        serve(settings)
    except CatalogError as err:
        print(f"cedarberg: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"cedarberg: cannot listen on {settings.host}:{settings.port}: {err.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
