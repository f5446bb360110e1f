"""The real gateway application in this process, for tests of the request pipeline.

`gateway.web.app.create_app(settings)` is the application `cedarberg serve` runs in each worker:
the same middlewares, routes, registry (SQLite, or PostgreSQL: `prepare_template(..., store)`),
local KEK, bundled Cedar policies, rate limiter and audit log. Here it is served by aiohttp's
test server on loopback, with the pipeline's front installed as a worker installs it
(`fronted`), and driven by aiohttp's test client (the `aiohttp_client` fixture of
pytest-aiohttp), with no process to start and no engine.

What `cedarberg serve` does once before any worker starts (`gateway.serve.server.prepare`:
migrate the registry, create the KEK and the token signing key, validate the policies) is done
once per test session into a template data directory; each application gets a copy of it, so a
test starts from an empty catalog in a few tens of milliseconds.

    settings = inprocess_settings(template, tmp_path, anonymous=False, config={...})
    client = await aiohttp_client(await fronted(create_app(settings)))
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.key_store import open_key_store
from cedarberg.gateway.authn.principal import PrincipalKind
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.serve.server import prepare
from cedarberg.gateway.web import front
from tests.support.audit import audit_log
from tests.support.gateway import TEST_DEFAULTS
from tests.support.postgres import PostgresServer

_AUDIT_FILE = "audit.jsonl"


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# API keys every copy of the template holds: principal -> groups. Creating a key costs an Argon2id
# hash (tens to hundreds of milliseconds): done once per session, each test pays only the first
# verification of the keys it uses.
TEMPLATE_KEYS: dict[str, tuple[str, ...]] = {
    "root": ("admins",),
    "root2": ("admins",),
    "ana": ("analysts",),
    "etl-bot": ("etl",),
    "prometheus": ("monitoring",),
    "nobody": ("no-grants",),
}


def _embedded_store() -> str | None:
    return None


@dataclass(frozen=True)
class Template:
    """A prepared data directory, the plaintext of its API keys (by principal), and where each
    copy's registry is: `new_store()` gives a fresh copy of the template's registry (its URL), or
    None for the SQLite file copied with the data directory."""

    data_dir: Path
    keys: Mapping[str, str]
    new_store: Callable[[], str | None] = _embedded_store


def prepare_template(data_dir: Path, store: PostgresServer | None = None) -> Template:
    """Run `cedarberg serve`'s one-time preparation in `data_dir` (registry schema at head, local
    KEK, token signing key, policies validated), then create `TEMPLATE_KEYS` as `cedarberg keys
    create` does. The registry is SQLite in `data_dir`, or with `store` a database of that server
    that each copy clones."""
    if store is None:
        settings = Settings(data_dir=data_dir)
    else:
        database = f"inprocess_template_{uuid.uuid4().hex[:12]}"
        settings = Settings(data_dir=data_dir, store_url=store.create_database(database))
    prepare(settings)
    keys = asyncio.run(_create_keys(settings))
    if store is None:
        return Template(data_dir, keys)
    return Template(data_dir, keys, lambda: store.clone_database(database))


async def _create_keys(settings: Settings) -> dict[str, str]:
    store = await open_key_store(settings.effective_store_url())
    try:
        keys = ApiKeyAuthenticator(store, settings.api_keys)
        created = {}
        for principal, groups in TEMPLATE_KEYS.items():
            _record, plaintext = await keys.create_key(principal, PrincipalKind.SERVICE, groups)
            created[principal] = plaintext
        return created
    finally:
        await store.close()


def inprocess_settings(
    template: Template,
    tmp_path: Path,
    *,
    anonymous: bool = True,
    config: Mapping[str, Any] | None = None,
) -> Settings:
    """Settings of a fresh gateway in `tmp_path / "gw"`, whose data directory starts as a copy of
    the prepared `template`.

    `anonymous=True` adds what the process-based catalog suites run with (`TEST_DEFAULTS`: an
    anonymous admin, generous rate limits); `anonymous=False` is a gateway as deployed, with the
    default limits. Audit records go to `tmp_path / "audit.jsonl"` (see `audit_records`);
    `config` is merged over all of it, as a TOML file would be.
    """
    data_dir = tmp_path / "gw"
    shutil.copytree(template.data_dir, data_dir)
    base: dict[str, Any] = {
        "data_dir": str(data_dir),
        "store_url": template.new_store(),
        "audit": {"destination": str(tmp_path / _AUDIT_FILE)},
        "warehouses": {
            "default": {"location": (data_dir / "warehouse").as_uri(), "drop_retention_seconds": 0},
        },
    }
    if anonymous:
        base = _merge(TEST_DEFAULTS, base)
    return Settings.model_validate(_merge(base, config or {}))


async def fronted(app: web.Application) -> TestServer:
    """`app` on a started test server whose requests enter the pipeline at its front, as in a
    worker (`gateway.web.front`); pass it to `aiohttp_client`."""
    server = TestServer(app)
    await server.start_server()
    assert server.runner is not None
    front.install(server.runner)
    return server


def audit_records(settings: Settings) -> list[dict[str, Any]]:
    """The audit records written so far (the audit log writes in the background: read after the
    application has closed, or after a request whose record is awaited)."""
    return audit_log(Path(settings.audit.destination))
