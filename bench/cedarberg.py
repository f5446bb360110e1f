"""Cedarberg as it runs in production, started for a benchmark variant.

No anonymous access; the bundled Cedar policies; the default warehouse seals metadata files;
rate limiting on with budgets far above the load (so it is measured, never hit); JWT bearer
auth: an admin API key is bootstrapped offline (``cedarberg keys create``) before the server
starts, a writer key of group ``etl`` is created through the admin API, and both keys are
exchanged for gateway JWTs at ``POST /v1/oauth/tokens``. Every measured request carries
``Authorization: Bearer <jwt>``, except the credential-form scenarios (bench/credential_forms.py),
which send the writer's API key itself or a token of an OIDC issuer the gateway trusts.
Variants: TLS off/on, 1 worker or one per core, the registry (and key store) in the embedded SQLite
file or in a PostgreSQL database of a cluster started for the variant (bench/postgres.py).

Durability is on as in production: the gateway has no setting that turns it off (SQLite runs with
``synchronous=FULL``, PostgreSQL sessions with ``synchronous_commit=on``, local metadata files and
their directories are fsynced); ``durability()`` records what the run measured with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import fixtures, postgres
from bench.credential_forms import OIDC_ROLE, WRITER_KEY_ROLE, Issuer, running_issuer
from bench.endpoint import Endpoint
from bench.http import HttpClient, bearer, client_token
from bench.procstat import loaded_event_loop
from tests.support.gateway import GatewayProcess, to_toml
from tests.support.secure import keys_create, split_key
from tests.support.tls import TestPki

HUGE_BUDGET = "100000000/minute"
RATE_LIMITS = {name: HUGE_BUDGET for name in ("per_address", "read", "write", "admin", "token")}
TOKEN_TTL_SECONDS = 86_400  # the largest the gateway allows; a run lasts well under that
WRITER_GROUP = "etl"
# A gateway starts in about a second on a quiet machine; the tests' 30 s is too short for one
# whose cores are shared with a previous variant's PostgreSQL checkpoint or other load (a server
# that never answers still fails the variant, only later).
READY_TIMEOUT_SECONDS = 120.0
SQLITE, POSTGRES = "SQLite", "PostgreSQL"


def gateway_config(tls_pki: TestPki | None, issuer: Issuer | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "rate_limits": {"enabled": True, **RATE_LIMITS},
        "tokens": {"ttl_seconds": TOKEN_TTL_SECONDS},
    }
    if issuer is not None:
        config["oidc"] = issuer.gateway_config()
    if tls_pki is not None:
        config["tls"] = {"cert_file": str(tls_pki.server_cert), "key_file": str(tls_pki.server_key)}
    return config


@dataclass(frozen=True)
class Variant:
    """A Cedarberg configuration the suite measures, and the operations it runs."""

    tls: bool
    workers: int
    store: str  # SQLITE or POSTGRES
    operations: tuple[str, ...]

    @property
    def name(self) -> str:
        """e.g. ``http-1w``, ``tls-1w``, ``http-2w-pg``."""
        return variant_name(tls=self.tls, workers=self.workers, store=self.store)


def variant_name(*, tls: bool, workers: int, store: str) -> str:
    """The name of a variant, e.g. ``http-1w``, ``tls-1w``, ``http-2w-pg`` (the middle part of its
    scenarios' keys ``cedarberg/<variant>/<operation>``)."""
    suffix = "-pg" if store == POSTGRES else ""
    return f"{'tls' if tls else 'http'}-{workers}w{suffix}"


def durability(store: str, postgres_settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """What makes an acknowledged commit survive power loss in this variant, as measured."""
    from cedarberg.catalog.store.postgres_driver import POSTGRES_SERVER_SETTINGS
    from cedarberg.catalog.store.sqlite_driver import SQLITE_SYNCHRONOUS

    described = {
        "registry": store,
        "metadata files": "local warehouse (file:), each new file and directory entry fsynced",
    }
    if store == POSTGRES:
        described["gateway sessions"] = ", ".join(f"{k}={v}" for k, v in POSTGRES_SERVER_SETTINGS.items())
        described["server"] = ", ".join(f"{k}={v}" for k, v in (postgres_settings or {}).items())
    else:
        described["SQLite"] = f"journal_mode=WAL, synchronous={SQLITE_SYNCHRONOUS}"
    return described


@contextlib.contextmanager
def running_cedarberg(work_dir: Path, variant: Variant, *, tls_pki: TestPki | None) -> Iterator[Endpoint]:
    """Start a gateway for ``variant`` in ``work_dir`` (TLS with ``tls_pki``; on PostgreSQL, a
    cluster of its own first), seed the catalog, and yield its Endpoint; the gateway and the
    cluster are stopped on exit."""
    with contextlib.ExitStack() as stack:
        store_url: str | None = None
        postgres_settings: dict[str, str] | None = None
        if variant.store == POSTGRES:
            server = stack.enter_context(postgres.running_postgres(work_dir / "postgres"))
            store_url = server.create_database(postgres.DATABASE)
            postgres_settings = postgres.durability(server)
        data_dir = work_dir / "gateway"
        data_dir.mkdir(parents=True, exist_ok=True)
        issuer = stack.enter_context(running_issuer(WRITER_GROUP))
        config = gateway_config(tls_pki, issuer)
        config_path = work_dir / "gateway.toml"  # where GatewayProcess writes it, too
        config_path.write_text(to_toml(config))
        admin_key = keys_create(
            data_dir, "bench-admin", ["admins"], config_path=config_path, store_url=store_url
        )
        gateway = GatewayProcess(
            data_dir,
            store_url=store_url,
            config=config,
            extra_args=["--workers", str(variant.workers)],
            anonymous=False,
            ca_cert=tls_pki.ca_cert if tls_pki is not None else None,
            probe_headers=bearer(admin_key),
            ready_timeout=READY_TIMEOUT_SECONDS,
        )
        stack.callback(gateway.stop)
        gateway.start()
        endpoint = _prepare(gateway, admin_key, tls_pki, variant)
        endpoint.tokens[OIDC_ROLE] = issuer.token()
        endpoint.durability = durability(variant.store, postgres_settings)
        yield endpoint


def _prepare(gateway: GatewayProcess, admin_key: str, tls_pki: TestPki | None, variant: Variant) -> Endpoint:
    cafile = tls_pki.ca_cert if tls_pki is not None else None
    client = HttpClient(cafile)
    reply = client.post_json(
        f"{gateway.url}/admin/v1/api-keys",
        {"principal": "bench-writer", "kind": "service", "groups": [WRITER_GROUP]},
        bearer(admin_key),
    )
    if reply.status not in (200, 201):
        raise RuntimeError(f"creating the writer key failed: {reply.status} {reply.text()}")
    writer_id, writer_secret = split_key(str(reply.json()["key"]))
    admin_id, admin_secret = split_key(admin_key)
    token_url = f"{gateway.url}/v1/oauth/tokens"
    tokens = {
        "writer": client_token(client, token_url, writer_id, writer_secret),
        "admin": client_token(client, token_url, admin_id, admin_secret),
        WRITER_KEY_ROLE: str(reply.json()["key"]),
    }
    config = client.get(f"{gateway.url}/v1/config", bearer(tokens["writer"]))
    if config.status != 200:
        raise RuntimeError(f"GET /v1/config as the writer failed: {config.status} {config.text()}")
    prefix = str(config.json().get("overrides", {}).get("prefix", ""))

    from pyiceberg.catalog.rest import RestCatalog

    properties: dict[str, Any] = {"uri": gateway.url, "token": tokens["admin"]}
    if cafile is not None:
        properties["ssl"] = {"cabundle": str(cafile)}
    fixtures.seed(RestCatalog("bench-admin", **properties), {"cedarberg.writers": WRITER_GROUP})
    assert gateway.pid is not None
    return Endpoint(
        system="cedarberg",
        variant=variant.name,
        base_url=gateway.url,
        pid=gateway.pid,
        workers=variant.workers,
        tls=tls_pki is not None,
        cafile=cafile,
        prefix=prefix,
        tokens=tokens,
        client_id=writer_id,
        client_secret=writer_secret,
        event_loop=loaded_event_loop(gateway.pid),
        log_path=gateway.log_path,
    )
