"""The real gateway application in this process, for tests of the request pipeline.

`gateway.web.app.create_app(settings)` is the application `cedarberg serve` runs in each worker:
the same middlewares, routes, SQLite registry, local KEK, bundled Cedar policies, rate limiter and
audit log. Here it is served by aiohttp's test server on loopback and driven by aiohttp's test
client (the `aiohttp_client` fixture of pytest-aiohttp), with no process to start and no engine.

What `cedarberg serve` does once before any worker starts (`gateway.serve.server.prepare`:
migrate the registry, create the KEK and the token signing key, validate the policies) is done
once per test session into a template data directory; each application gets a copy of it, so a
test starts from an empty catalog in a few tens of milliseconds.

    settings = inprocess_settings(template, tmp_path, anonymous=False, config={...})
    client = await aiohttp_client(create_app(settings))
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.config.settings import Settings
from gateway.serve.server import prepare
from tests.support.gateway import TEST_DEFAULTS

# Files the template holds beside the registry: the local KEK and the token signing key.
_AUDIT_FILE = "audit.jsonl"


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def prepare_template(data_dir: Path) -> Path:
    """Run `cedarberg serve`'s one-time preparation in `data_dir` (registry schema at head, local
    KEK, token signing key, policies validated) and return it."""
    prepare(Settings(data_dir=data_dir))
    return data_dir


def inprocess_settings(
    template: Path,
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
    shutil.copytree(template, data_dir)
    base: dict[str, Any] = {
        "data_dir": str(data_dir),
        "audit": {"destination": str(tmp_path / _AUDIT_FILE)},
        "warehouses": {
            "default": {"location": (data_dir / "warehouse").as_uri(), "drop_retention_seconds": 0},
        },
    }
    if anonymous:
        base = _merge(TEST_DEFAULTS, base)
    return Settings.model_validate(_merge(base, config or {}))


def audit_records(settings: Settings) -> list[dict[str, Any]]:
    """The audit records written so far (the audit log writes in the background: read after the
    application has closed, or after a request whose record is awaited)."""
    path = Path(settings.audit.destination)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
