"""API keys listed from a SQLite key store without SQLAlchemy: the fast path of `cedarberg keys list`.

`cedarberg keys list` is meant to answer in a fraction of a second, and importing SQLAlchemy and
Alembic alone takes longer than that. So, on a SQLite store that exists, the listing reads
`api_keys` with the standard library's `sqlite3`, on a read-only connection, and builds each
record with the key store's own `record_from_row`, the values converted as SQLAlchemy's column
types convert them (by the column's declared type: DATETIME, JSON, BOOLEAN). The secret hash is
never selected.

Anything else returns None, and the caller uses the key store (`key_store.open_key_store`): a
PostgreSQL store, a SQLite URL with options, a file that does not exist yet (the key store creates
and migrates it), a table that lacks a column the records need (the key store migrates it), or any
`sqlite3` error (the key store reports it as `StorageUnavailableError`). `tests/gateway/
test_key_listing.py` checks that both paths list the same records.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cedarberg.gateway.authn.key_record import ApiKeyRecord, record_from_row

# The SQLite spellings of catalog.store.urls (not imported: that package imports SQLAlchemy).
_URL_PREFIXES = ("sqlite:///", "sqlite+aiosqlite:///")
# The columns `record_from_row` reads; a table without one of them is left to the key store.
RECORD_COLUMNS = frozenset(
    {"id", "principal", "kind", "groups", "created_at", "expires_at", "revoked_at", "rotated_at",
     "description", "generation", "previous_secret_until"}
)  # fmt: skip
_SECRET_COLUMNS = frozenset({"secret_hash", "previous_secret_hash"})
_BUSY_TIMEOUT_SECONDS = 5.0  # a writer (`keys create`, a gateway) holds the lock for milliseconds


def sqlite_file(url: str) -> Path | None:
    """The file of a plain `sqlite:///PATH` (or `sqlite+aiosqlite:///PATH`) URL, else None."""
    prefix = next((prefix for prefix in _URL_PREFIXES if url.startswith(prefix)), None)
    if prefix is None or "?" in url:
        return None
    path = url[len(prefix) :]
    if not path or path == ":memory:":
        return None
    return Path(path)


def _value(value: Any, declared: str) -> Any:
    """`value` as SQLAlchemy's type for a column declared `declared` returns it on SQLite."""
    if value is None:
        return None
    if declared.startswith(("DATETIME", "TIMESTAMP")):
        return datetime.fromisoformat(value)
    if declared == "JSON":
        return json.loads(value)
    if declared == "BOOLEAN":
        return bool(value)
    return value


def list_sqlite_keys(url: str, principal: str | None = None) -> list[ApiKeyRecord] | None:
    """Every key of the SQLite store at `url` (only `principal`'s, if given), ordered by id, as
    `KeyStore.list_records` returns them; None when this path does not apply (see the module)."""
    path = sqlite_file(url)
    if path is None or not path.is_file():
        return None
    try:
        connection = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_SECONDS
        )
    except sqlite3.Error:
        return None
    try:
        declared = {
            str(row[1]): str(row[2]).upper() for row in connection.execute("PRAGMA table_info(api_keys)")
        }
        if not declared.keys() >= RECORD_COLUMNS:
            return None
        columns = sorted(declared.keys() - _SECRET_COLUMNS)
        selected = ", ".join(f'"{name}"' for name in columns)  # names from the schema, quoted
        where, params = ("WHERE principal = ?", (principal,)) if principal is not None else ("", ())
        rows = connection.execute(f"SELECT {selected} FROM api_keys {where} ORDER BY id", params).fetchall()  # noqa: S608
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return [
        record_from_row(
            SimpleNamespace(
                **{name: _value(value, declared[name]) for name, value in zip(columns, row, strict=True)}
            )
        )
        for row in rows
    ]
