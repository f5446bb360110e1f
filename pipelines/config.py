"""The pipeline's settings: one frozen object, built from command-line values and the environment.

API keys come only from the environment (never argv, where ``ps`` shows them):

- ``PIPELINE_SERVICE_KEY``: the service account's key (writes bronze, silver, gold);
- ``PIPELINE_ANALYST_KEY``: the analyst's key (a reader of the analytics namespace).

They deliberately do not start with ``CEDARBERG_``: the gateway reads every ``CEDARBERG_*``
variable as one of its settings and refuses unknown ones, so a shell that exports the pipeline's
keys could not also start ``cedarberg serve``.

Keys are held as `ApiKey`, whose ``repr`` never shows the secret. This module is the only one
that reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ANALYST_KEY_VARIABLE", "SERVICE_KEY_VARIABLE", "ApiKey", "ConfigError", "PipelineConfig"]

SERVICE_KEY_VARIABLE = "PIPELINE_SERVICE_KEY"
ANALYST_KEY_VARIABLE = "PIPELINE_ANALYST_KEY"
_KEY_PREFIX = "cbk_"
_KEY_LENGTH = 64
_ID_END = 20


class ConfigError(ValueError):
    """A setting is missing or malformed (the message never contains a secret)."""


@dataclass(frozen=True)
class ApiKey:
    """A gateway API key ``cbk_<16-char id>_<secret>``: the OAuth2 client id and client secret."""

    client_id: str
    secret: str = field(repr=False)

    @classmethod
    def parse(cls, key: str, *, source: str) -> ApiKey:
        """Raises `ConfigError` (naming ``source``, not the value) unless ``key`` is an API key."""
        key = key.strip()
        if not key.startswith(_KEY_PREFIX) or len(key) != _KEY_LENGTH or key[_ID_END] != "_":
            raise ConfigError(f"{source} does not hold a Cedarberg API key (cbk_<id>_<secret>)")
        return cls(client_id=key[len(_KEY_PREFIX) : _ID_END], secret=key[_ID_END + 1 :])

    @property
    def credential(self) -> str:
        """``<client id>:<client secret>``, Iceberg's ``credential`` catalog property."""
        return f"{self.client_id}:{self.secret}"


@dataclass(frozen=True)
class PipelineConfig:
    """Everything one run needs. ``uri`` is the gateway's base URL (``https://host:port``).

    ``truststore``/``truststore_password`` make the Spark driver JVM trust the gateway's CA (only
    when the pipeline starts its own JVM); ``ca_cert`` is the same CA as PEM, for DuckDB.
    """

    uri: str
    service_key: ApiKey
    analyst_key: ApiKey
    work_dir: Path
    warehouse: str = "default"
    catalog: str = "lake"
    raw_namespace: str = "raw"
    analytics_namespace: str = "analytics"
    rows: int = 300_000
    seed: int = 42
    file_format: str = "json"
    truststore: Path | None = None
    truststore_password: str = field(default="", repr=False)
    ca_cert: Path | None = None
    shuffle_partitions: int = 2
    run_duckdb: bool = True

    def __post_init__(self) -> None:
        if not self.uri.startswith(("https://", "http://")):
            raise ConfigError(f"--uri must be an http(s) URL, not {self.uri!r}")
        if self.rows < 100:
            raise ConfigError("--rows must be at least 100")
        if self.file_format not in ("json", "csv"):
            raise ConfigError("--format must be json or csv")
        for name in (self.catalog, self.raw_namespace, self.analytics_namespace):
            if not name.isidentifier():
                raise ConfigError(f"{name!r} is not a plain SQL identifier")

    @property
    def token_uri(self) -> str:
        """The gateway's OAuth2 token endpoint (client credentials)."""
        return self.uri.rstrip("/") + "/v1/oauth/tokens"

    @property
    def raw_dir(self) -> Path:
        return self.work_dir / "raw"

    @staticmethod
    def keys_from_environment(environ: Mapping[str, str] | None = None) -> tuple[ApiKey, ApiKey]:
        """(service key, analyst key) from ``PIPELINE_SERVICE_KEY`` / ``PIPELINE_ANALYST_KEY``.

        Raises `ConfigError` if either is unset or not an API key.
        """
        env = os.environ if environ is None else environ
        keys = []
        for variable in (SERVICE_KEY_VARIABLE, ANALYST_KEY_VARIABLE):
            value = env.get(variable, "")
            if not value:
                raise ConfigError(f"set {variable} to an API key (the environment, never argv)")
            keys.append(ApiKey.parse(value, source=variable))
        return keys[0], keys[1]
