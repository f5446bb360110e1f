"""The one typed, frozen settings object and its loader.

Precedence, lowest first: built-in defaults, the TOML file (`--config`), `CEDARBERG_*` environment
variables (nested keys joined by `__`, e.g. `CEDARBERG_WAREHOUSES__SALES__LOCATION`), command-line
flags. This module is the only place that reads the environment. A bad value raises
`SettingsError` whose message names the setting, so the CLI can exit with one clear line.
"""

from __future__ import annotations

import importlib.util
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from cedarberg.catalog import json_nesting, locations
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.store.urls import SUPPORTED_FORMS, is_supported
from cedarberg.gateway.config.audit import AuditSettings
from cedarberg.gateway.config.authn import ApiKeySettings, DelegationSettings, OidcSettings, TokenSettings
from cedarberg.gateway.config.authz import AuthzSettings
from cedarberg.gateway.config.base import FrozenSettings
from cedarberg.gateway.config.caches import ReadCacheSettings
from cedarberg.gateway.config.console import ConsoleSettings
from cedarberg.gateway.config.environment import ENV_PREFIX
from cedarberg.gateway.config.planning import PlanningSettings
from cedarberg.gateway.config.ratelimit import RateLimitSettings
from cedarberg.gateway.config.storage import S3Settings, VendingSettings
from cedarberg.gateway.config.tls import TlsSettings
from cedarberg.kms.settings import KmsSettings

# The deepest request body the parsers are known to survive with room to spare (see
# `catalog.json_nesting`): tests/gateway/test_parse_failures.py serves bodies this deep.
MAX_BODY_DEPTH = json_nesting.MAX_SAFE_DEPTH
RESERVED_WAREHOUSE_NAMES = frozenset({"namespaces", "tables", "views", "transactions", "config", "oauth"})


class SettingsError(Exception):
    """Configuration that cannot be used; the message names the offending setting."""


class WarehouseSettings(FrozenSettings):
    location: str = Field(description="Root of the warehouse: an absolute path, file:// or s3:// URI.")
    seal_metadata_files: bool = Field(
        True,
        description="Seal the metadata files written to this warehouse (engines get metadata from the "
        "API). Drops then become soft deletes purged by the gateway after drop_retention_seconds.",
    )
    drop_retention_seconds: int = Field(
        7 * 24 * 3600,
        ge=0,
        le=365 * 24 * 3600,
        description="How long a dropped table or view of a sealing warehouse can be undropped.",
    )
    allow_locations_outside_namespace: bool = Field(
        False,
        description="Let table and view locations lie outside their namespace's directory (for "
        "migrating existing tables). They still may not be a warehouse root or a namespace directory "
        "and never overlap another table's or view's location. Also admits legacy layouts inside "
        "the namespace directory (`<namespace>/<table>`) instead of requiring an object directory "
        "(`<namespace>/<name>-<32 hex digits>`); while it is on, such a location can take the "
        "directory a child namespace would get by default, so turn it off once migrated.",
    )
    s3: S3Settings | None = Field(None, description="How the gateway reaches an s3:// warehouse.")
    vending: VendingSettings | None = Field(
        None, description="Vended credentials for engines (X-Iceberg-Access-Delegation); s3:// only."
    )

    @field_validator("location")
    @classmethod
    def _normalized(cls, value: str) -> str:
        try:
            return locations.normalize(value)
        except InvalidRequestError as err:
            raise ValueError(str(err)) from err

    @model_validator(mode="after")
    def _s3_only_for_s3(self) -> WarehouseSettings:
        if self.s3 is None and self.vending is None:
            return self
        if not self.location.startswith("s3://"):
            raise ValueError("s3 and vending settings apply only to an s3:// warehouse location")
        if importlib.util.find_spec("boto3") is None:  # STS and SigV4: fail at start, not per request
            raise ValueError("s3 and vending settings need boto3: pip install 'cedarberg[s3]'")
        return self


class AnonymousSettings(FrozenSettings):
    """An explicit principal for requests without credentials. Off unless configured: for local
    development and tests of catalog behaviour only; Cedar still decides what it may do."""

    principal: str = Field(description="Principal id given to unauthenticated requests.")
    groups: tuple[str, ...] = Field((), description="Groups of that principal.")


class Settings(FrozenSettings):
    """Everything the gateway can be told. Frozen: built once at start-up."""

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8181, ge=1, le=65535, description="TCP port to listen on.")
    data_dir: Path = Field(Path(".cedarberg"), description="Directory for all embedded state.")
    store_url: SecretStr | None = Field(
        None,
        description="URL of the registry (default: SQLite file under data_dir). Supported: "
        "sqlite:///PATH (or sqlite+aiosqlite:///PATH), postgresql+asyncpg://... (or postgresql://...).",
    )
    store_pool_size: int = Field(
        10,
        ge=1,
        le=500,
        description="PostgreSQL connections each worker may open for the registry (the API key "
        "store opens up to 4 more). A deployment opens up to instances x workers x "
        "(store_pool_size + store_max_overflow + 4) connections; keep that under the server's "
        "max_connections.",
    )
    store_max_overflow: int = Field(
        10, ge=0, le=500, description="Extra registry connections a worker may open under load."
    )
    warehouses: dict[str, WarehouseSettings] = Field(
        default_factory=dict,
        description="Named warehouses; default: one warehouse 'default' under data_dir/warehouse.",
    )
    default_warehouse: str = Field("default", description="Warehouse served when a client names none.")
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, le=1024**3, description="Largest accepted request body."
    )
    max_body_depth: int = Field(
        MAX_BODY_DEPTH,
        ge=16,
        le=MAX_BODY_DEPTH,
        description="Deepest nesting of objects and arrays accepted in a JSON request body, counted "
        "on its bytes before parsing (deeper: 400). 100 admits a schema of 30 nested structs or 90 "
        "nested lists, or a filter of 90 predicates joined left-deep; it cannot be raised: the "
        "parsers of types and filters recurse and would exhaust Python's stack at about 140.",
    )
    idempotency_key_lifetime_seconds: int = Field(
        1800, ge=60, le=7 * 24 * 3600, description="How long an Idempotency-Key is remembered and replayed."
    )
    default_page_size: int = Field(100, ge=1, le=10_000, description="Page size when a client sends none.")
    max_page_size: int = Field(1000, ge=1, le=10_000, description="Upper bound on pageSize.")
    log_level: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$", description="Log level.")
    log_format: Literal["json", "text"] = Field(
        "json",
        description="json: one JSON object per line with the request id and principal (for log "
        "pipelines); text: human-readable lines for a terminal.",
    )
    access_log: bool = Field(
        False,
        description="Log one line per request (method, path, status, milliseconds). Off by "
        "default: the audit log records every decision with its request id and /metrics counts "
        "every request, while a log line per request costs about a third of a cached read's CPU.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes sharing the listening port (about one per core): the "
        "supervisor hands each connection to the one with the fewest open. Each has its own "
        "caches and connection pools; metrics are summed over all of them.",
    )
    shutdown_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=600,
        description="On SIGTERM/SIGINT: how long requests in flight (commits) may take to finish "
        "after the port stops accepting; then the process closes.",
    )
    migrate_on_start: bool = Field(
        True,
        description="Upgrade the registry schema when serve starts (under a lock, so several "
        "starting gateways agree). false: serve refuses an outdated schema; run `cedarberg db "
        "upgrade` first.",
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto",
        description="Event loop of a server process: uvloop (about a tenth less CPU per request) or "
        "the standard asyncio loop; auto: uvloop when installed.",
    )
    slow_callback_warning_ms: float = Field(
        0,
        ge=0,
        le=60_000,
        description="Debugging: run the event loop in asyncio debug mode and log every callback "
        "that holds the loop longer than this (a blocking call on the loop). 0: off.",
    )
    tls: TlsSettings = Field(default_factory=TlsSettings, description="TLS of the listening socket.")
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings, description="Rate limits.")
    audit: AuditSettings = Field(default_factory=AuditSettings, description="Audit log destination.")
    authz: AuthzSettings = Field(default_factory=AuthzSettings, description="Cedar policies.")
    api_keys: ApiKeySettings = Field(default_factory=ApiKeySettings, description="API key verification.")
    tokens: TokenSettings = Field(default_factory=TokenSettings, description="Gateway-issued access tokens.")
    oidc: OidcSettings = Field(default_factory=OidcSettings, description="Trusted OIDC issuers.")
    delegation: DelegationSettings = Field(
        default_factory=DelegationSettings, description="Engines acting for their users (token exchange)."
    )
    kms: KmsSettings = Field(default_factory=KmsSettings, description="Envelope encryption keys.")
    cache: ReadCacheSettings = Field(default_factory=ReadCacheSettings, description="Read-path caches.")
    planning: PlanningSettings = Field(
        default_factory=PlanningSettings, description="Server-side scan planning."
    )
    purge_interval_seconds: float = Field(
        60.0, gt=0, le=86_400, description="How often soft-deleted objects past their retention are purged."
    )
    purge_retry_initial_seconds: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="After an object's purge fails (recorded on it and shown in the dropped listing), "
        "how long its next attempt waits; the wait doubles after each further failure. Other "
        "objects are purged meanwhile.",
    )
    purge_retry_max_seconds: float = Field(
        21_600.0,
        gt=0,
        le=7 * 86_400,
        description="Longest wait between purge attempts of one object whose purge keeps failing "
        "(at least purge_retry_initial_seconds).",
    )
    metrics_report_retention_seconds: int = Field(
        30 * 24 * 3600,
        ge=1,
        le=10 * 365 * 24 * 3600,
        description="How long table metrics reports are kept; older ones are deleted every "
        "purge_interval_seconds. A report is at most 64 KiB of JSON (catalog.metrics_reports).",
    )
    anonymous: AnonymousSettings | None = Field(
        None, description="UNSAFE outside development: a principal for requests without credentials."
    )
    console: ConsoleSettings = Field(
        default_factory=ConsoleSettings, description="The security console in the browser (off by default)."
    )

    @field_validator("store_url")
    @classmethod
    def _supported_store(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not is_supported(value.get_secret_value()):
            raise ValueError(f"must be {SUPPORTED_FORMS}")
        return value

    @field_validator("warehouses")
    @classmethod
    def _valid_names(cls, value: dict[str, WarehouseSettings]) -> dict[str, WarehouseSettings]:
        for name in value:
            if (
                not name
                or name in RESERVED_WAREHOUSE_NAMES
                or not name.replace("-", "").replace("_", "").isalnum()
            ):
                raise ValueError(
                    f"invalid warehouse name {name!r} (letters, digits, '-' and '_'; not reserved)"
                )
        return value

    @model_validator(mode="after")
    def _purge_retry_bounds(self) -> Settings:
        if self.purge_retry_max_seconds < self.purge_retry_initial_seconds:
            raise ValueError("purge_retry_max_seconds must be at least purge_retry_initial_seconds")
        return self

    @model_validator(mode="after")
    def _default_warehouse_exists(self) -> Settings:
        if self.warehouses and self.default_warehouse not in self.warehouses:
            raise ValueError(f"default_warehouse {self.default_warehouse!r} is not among the warehouses")
        return self

    @model_validator(mode="after")
    def _console_needs_tls_and_its_issuer(self) -> Settings:
        """The console's cookie is `Secure` and `__Host-` prefixed (browsers keep it only from
        https), and its sign-in issuer must be one the gateway trusts for bearer tokens: a session
        is the principal a token of that issuer would be."""
        console = self.console
        if not console.enabled:
            return self
        if not self.tls.enabled:
            raise ValueError("console.enabled needs TLS: set tls.cert_file and tls.key_file")
        if console.url is None and self.host in ("0.0.0.0", "::", ""):  # noqa: S104 - compared, not bound
            raise ValueError("console.url must be set when host is a wildcard address")
        if console.oidc_issuer is not None and not any(
            issuer.alias == console.oidc_issuer for issuer in self.oidc.issuers
        ):
            raise ValueError(
                f"console.oidc_issuer {console.oidc_issuer!r} is not the alias of an oidc issuer"
            )
        return self

    def effective_warehouses(self) -> dict[str, WarehouseSettings]:
        """The configured warehouses, or the embedded default under data_dir."""
        if self.warehouses:
            return self.warehouses
        root = (self.data_dir / "warehouse").resolve()
        return {self.default_warehouse: WarehouseSettings(location=root.as_uri())}

    def effective_local_key_dir(self) -> Path:
        return (self.kms.local_key_dir or self.data_dir / "kms").resolve()

    def effective_store_url(self) -> str:
        if self.store_url is not None:
            return self.store_url.get_secret_value()
        return f"sqlite:///{(self.data_dir / 'catalog.db').resolve()}"


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX) or key == ENV_PREFIX:
            continue
        path = key[len(ENV_PREFIX) :].lower().split("__")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(config_file: Path | None, environ: Mapping[str, str], flags: Mapping[str, Any]) -> Settings:
    """Build the settings from file, environment and flags (in rising precedence).

    Raises SettingsError naming the first bad setting.
    """
    data: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except OSError as err:
            raise SettingsError(f"config: cannot read {config_file}: {err.strerror}") from err
        except tomllib.TOMLDecodeError as err:
            raise SettingsError(f"config: {config_file} is not valid TOML: {err}") from err
    data = _merge(data, _env_overrides(environ))
    data = _merge(data, {key: value for key, value in flags.items() if value is not None})
    try:
        return Settings.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "settings"
        raise SettingsError(f"invalid setting '{where}': {first['msg']}") from None
