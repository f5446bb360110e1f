"""Column values of the gateway's tables as the registry's drivers return them, made uniform.

The drivers (catalog.store.sqlite_driver, catalog.store.postgres_driver) hand rows back as the
database driver gives them, without SQLAlchemy's result processing: on SQLite a DATETIME column
is the text SQLAlchemy wrote (`2026-01-02 03:04:05.000006`, UTC without offset) and a JSON column
its text; on PostgreSQL a `timestamptz` is an aware datetime and a JSON column its text (asyncpg
decodes no JSON by default). Writing goes through SQLAlchemy's bind processing (catalog.store.
statements), so values are stored exactly as the SQLAlchemy engines stored them before.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def utc(value: datetime | str | None) -> datetime | None:
    """An aware UTC datetime for a stored timestamp (every value was written in UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def json_value(value: Any) -> Any:
    """The value of a stored JSON column (its text decoded; an already decoded value as is)."""
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value
