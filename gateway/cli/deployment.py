"""The deployment an offline command works on: its settings, loaded exactly as `cedarberg serve`
loads them, whether there is one to read, its policy directory, and its registry.

Settings, lowest precedence first (`gateway.config.settings.load_settings`): built-in defaults, the
TOML file of `--config`, `CEDARBERG_*` environment variables, the `--data-dir` / `--store-url`
flags. A bad setting is the message `serve` prints (`cedarberg: invalid setting ...`) and exit 2.

This module stays light on purpose (the command line starts without the catalog): the registry's
modules are imported only by `registry`, when a command reads one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit, urlunsplit

from cedarberg.gateway.config.environment import ENV_PREFIX

# The settings (pydantic) load when a command reads them, not when its parser is built
# (`cedarberg --help`: tests/gateway/test_cli_startup.py).
if TYPE_CHECKING:
    from cedarberg.gateway.config.settings import Settings
    from cedarberg.gateway.web.services import Services

PROG = "cedarberg"
OFFLINE_CONFLICT = "--offline reads no registry: drop --data-dir and --store-url"


def offline_options(*, warehouse: bool = True, store: bool = True) -> argparse.ArgumentParser:
    """The options naming the settings of a command that works without a server (as for serve):
    `--config`, and unless `store` is False the registry's `--data-dir` and `--store-url`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, help="TOML configuration file (as for serve)")
    if store:
        common.add_argument("--data-dir", type=Path, help="data directory (as for serve)")
        common.add_argument("--store-url", help="registry URL (as for serve)")
    if warehouse:
        common.add_argument("--warehouse", help="warehouse name (default: the default warehouse)")
    return common


def _store_flags(args: argparse.Namespace) -> dict[str, object]:
    return {"data_dir": getattr(args, "data_dir", None), "store_url": getattr(args, "store_url", None)}


def offline_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None, err: TextIO
) -> Settings | None:
    """The settings `offline_options` name (with `environ`, default the process environment), or
    None after printing on `err` the line `serve` prints for them."""
    from cedarberg.gateway.config.settings import SettingsError, load_settings

    try:
        return load_settings(args.config, os.environ if environ is None else environ, _store_flags(args))
    except SettingsError as error:
        print(f"{PROG}: {error}", file=err)
        return None


def settings_named(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """Whether the command line (`--config`, `--data-dir`, `--store-url`) or the environment (any
    `CEDARBERG_*` variable) names settings."""
    flags = (args.config, *_store_flags(args).values())
    return any(flag is not None for flag in flags) or any(
        key.startswith(ENV_PREFIX) and key != ENV_PREFIX for key in environ
    )


def names_a_store(args: argparse.Namespace) -> bool:
    """Whether `--data-dir` or `--store-url` is given (a usage error with `--offline`)."""
    return any(flag is not None for flag in _store_flags(args).values())


def deployment_found(args: argparse.Namespace, environ: Mapping[str, str], settings: Settings) -> bool:
    """Whether there is a deployment to read: settings are named (then its registry must be
    readable), or the default settings' registry exists (`./.cedarberg/catalog.db`). Without
    either the policy tools work offline, as before they read settings."""
    from cedarberg.gateway.serve.migrate import missing_sqlite_file

    return settings_named(args, environ) or not missing_sqlite_file(settings.effective_store_url())


def policy_dir(args: argparse.Namespace, settings: Settings) -> Path:
    """The policy directory a command reads: the one given on the command line, else the
    configured one (`authz.policy_dir`, which is the bundled set when nothing configures it)."""
    given: Path | None = getattr(args, "dir", None)
    return given if given is not None else settings.authz.policy_dir


def describe_store(url: str) -> str:
    """The registry URL without its password, to name it in output and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@asynccontextmanager
async def registry(settings: Settings) -> AsyncIterator[Services]:
    """The catalog services over the deployment's registry, for reading. The registry is never
    created or migrated here. Raises the catalog's errors: `SchemaOutdatedError` (missing or
    behind: run `cedarberg db upgrade`), `StorageUnavailableError`; `KmsError`, `OSError`."""
    from cedarberg.gateway.catalog_setup import close_catalog, open_catalog
    from cedarberg.gateway.serve.migrate import SchemaOutdatedError, ensure_current, missing_sqlite_file
    from cedarberg.gateway.web.services import Services

    url = settings.effective_store_url()
    if missing_sqlite_file(url):
        raise SchemaOutdatedError(
            f"the registry file {url.split('///', 1)[-1]} does not exist (a gateway creates it "
            "when it first serves, or `cedarberg db upgrade`)"
        )
    await ensure_current(url)
    ctx = await open_catalog(settings, migrate=False)
    try:
        yield Services.build(settings, ctx)
    finally:
        await close_catalog(ctx)
