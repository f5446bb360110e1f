"""`key_listing`: `cedarberg keys list` reads a SQLite key store without SQLAlchemy, and lists
exactly the records the key store lists (`KeyStore.list_records`), or defers to the key store.

Keys are made by the real key store (create, rotate, revoke, expiries, no or several groups, a
description with quotes and non-ASCII text); the two readers must agree record for record.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.key_listing import list_sqlite_keys, sqlite_file
from cedarberg.gateway.authn.key_record import ApiKeyRecord
from cedarberg.gateway.authn.key_store import open_key_store
from cedarberg.gateway.authn.principal import PrincipalKind


def _url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"  # the default form (sqlite_file accepts both)


async def _populate(url: str) -> None:
    store = await open_key_store(url)
    try:
        keys = ApiKeyAuthenticator(store)
        soon = datetime.now(UTC) + timedelta(minutes=5)
        future = datetime.now(UTC) + timedelta(days=30)
        await keys.create_key("alice", PrincipalKind.USER, ["admins"], None, "")
        await keys.create_key(
            "etl-bot", PrincipalKind.SERVICE, ["etl", "writers"], future, 'nightly "load" é'
        )
        await keys.create_key("bob", PrincipalKind.USER, [], soon, "no groups")
        rotated, _ = await keys.create_key("alice", PrincipalKind.USER, ["readers"], None, "rotated")
        await keys.rotate_key(rotated.key_id)
        revoked, _ = await keys.create_key("carol", PrincipalKind.USER, ["bi"], future, "revoked")
        await keys.revoke_key(revoked.key_id)
    finally:
        await store.close()


async def _stored(url: str, principal: str | None) -> list[ApiKeyRecord]:
    store = await open_key_store(url)
    try:
        return await store.list_records(principal=principal, after=None, limit=1000)
    finally:
        await store.close()


def test_lists_what_the_key_store_lists(tmp_path: Path) -> None:
    url = _url(tmp_path / "catalog.db")
    asyncio.run(_populate(url))
    stored = asyncio.run(_stored(url, None))
    listed = list_sqlite_keys(url)
    assert listed is not None
    assert len(stored) == 5
    assert listed == stored
    # What the conversions must get right is there to compare: UTC datetimes, lists of groups.
    assert {r.revoked_at is not None for r in listed} == {True, False}
    assert any(r.rotated_at is not None and r.generation == 1 for r in listed)
    assert all(r.created_at.tzinfo is UTC for r in listed)
    assert sum(r.expires_at is not None for r in listed) == 3
    assert {r.groups for r in listed} >= {("etl", "writers"), ()}


def test_filters_by_principal_in_id_order(tmp_path: Path) -> None:
    url = _url(tmp_path / "catalog.db")
    asyncio.run(_populate(url))
    listed = list_sqlite_keys(url, "alice")
    assert listed is not None
    assert listed == asyncio.run(_stored(url, "alice"))
    assert [r.principal for r in listed] == ["alice", "alice"]
    assert [r.key_id for r in listed] == sorted(r.key_id for r in listed)
    assert list_sqlite_keys(url, "nobody") == []


def test_never_reads_the_secret_hash(tmp_path: Path) -> None:
    """The hash column is not selected: a store whose hashes cannot even be read still lists."""
    path = tmp_path / "catalog.db"
    asyncio.run(_populate(_url(path)))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE api_keys SET secret_hash = CAST(x'00ff' AS BLOB)")
    listed = list_sqlite_keys(_url(path))
    assert listed is not None
    assert len(listed) == 5


def test_defers_to_the_key_store_when_it_does_not_apply(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    assert list_sqlite_keys(_url(missing)) is None
    assert not missing.exists()  # not created: the key store creates and migrates it
    assert list_sqlite_keys("postgresql+asyncpg://u@127.0.0.1:1/db") is None
    assert sqlite_file(f"sqlite+aiosqlite:///{missing}?mode=ro") is None
    assert sqlite_file("sqlite+aiosqlite:///:memory:") is None
    assert sqlite_file("sqlite:///:memory:") is None
    # Both spellings of a plain SQLite URL (the default is `sqlite:///`) name the file.
    assert sqlite_file(f"sqlite:///{missing}") == missing
    assert sqlite_file(f"sqlite+aiosqlite:///{missing}") == missing
    # A database without the table (or with an older one lacking a column) is not guessed at.
    bare = tmp_path / "bare.db"
    with sqlite3.connect(bare) as db:
        db.execute("CREATE TABLE api_keys (id TEXT PRIMARY KEY, principal TEXT)")
    assert list_sqlite_keys(_url(bare)) is None
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database" * 100)
    assert list_sqlite_keys(_url(garbage)) is None
