"""A commit is acknowledged only once it survives power loss: the registry's settings, and the
metadata file (with its directory entries) synced before the pointer names it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Integer, String, column, text

from cedarberg.catalog import fileio
from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.statements import Sql
from cedarberg.catalog.store.tx import StoreTx
from cedarberg.gateway.authn.key_store import open_key_store

SQLITE_SYNCHRONOUS_FULL = 2  # what PRAGMA synchronous answers for FULL
_SYNCHRONOUS = Sql(text("PRAGMA synchronous").columns(column("synchronous", Integer)))
_JOURNAL_MODE = Sql(text("PRAGMA journal_mode").columns(column("journal_mode", String)))
_FOREIGN_KEYS = Sql(text("PRAGMA foreign_keys").columns(column("foreign_keys", Integer)))
_SYNCHRONOUS_COMMIT = Sql(text("SHOW synchronous_commit").columns(column("synchronous_commit", String)))


async def _sqlite_settings(tx: StoreTx) -> tuple[int, str, int]:
    synchronous = (await tx.connection.execute(_SYNCHRONOUS)).scalar_one()
    journal = (await tx.connection.execute(_JOURNAL_MODE)).scalar_one()
    foreign_keys = (await tx.connection.execute(_FOREIGN_KEYS)).scalar_one()
    return int(synchronous), str(journal), int(foreign_keys)


async def test_the_sqlite_registry_syncs_every_commit(tmp_path: Path) -> None:
    """The writer connection (whose COMMIT runs on the commit thread) and the readers alike."""
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    try:
        async with store.write() as tx:
            assert await _sqlite_settings(tx) == (SQLITE_SYNCHRONOUS_FULL, "wal", 1)
        async with store.read() as tx:
            assert await _sqlite_settings(tx) == (SQLITE_SYNCHRONOUS_FULL, "wal", 1)
    finally:
        await store.close()


async def test_the_sqlite_key_store_syncs_every_commit(tmp_path: Path) -> None:
    """The gateway's tables (API keys, the directory, console sessions) run on the registry's
    driver: the same pragmas on its writer and its readers, in either URL spelling."""
    for url in (f"sqlite:///{tmp_path / 'keys.db'}", f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"):
        keys = await open_key_store(url)
        try:
            async with keys.writing() as conn:
                assert (await conn.execute(_SYNCHRONOUS)).scalar_one() == SQLITE_SYNCHRONOUS_FULL
                assert (await conn.execute(_JOURNAL_MODE)).scalar_one() == "wal"
            async with keys.reading() as conn:
                assert (await conn.execute(_SYNCHRONOUS)).scalar_one() == SQLITE_SYNCHRONOUS_FULL
                assert (await conn.execute(_FOREIGN_KEYS)).scalar_one() == 1
        finally:
            await keys.close()


@pytest.mark.postgres
async def test_postgres_key_store_sessions_keep_synchronous_commit_on(postgres_url: str) -> None:
    keys = await open_key_store(postgres_url)
    try:
        async with keys.writing() as conn:
            assert (await conn.execute(_SYNCHRONOUS_COMMIT)).scalar_one() == "on"
        async with keys.reading() as conn:
            assert (await conn.execute(_SYNCHRONOUS_COMMIT)).scalar_one() == "on"
    finally:
        await keys.close()


@pytest.mark.postgres
async def test_postgres_sessions_keep_synchronous_commit_on(postgres_url: str) -> None:
    """The test server runs with synchronous_commit=off (tests/support/postgres.py): the
    gateway's sessions turn it on for themselves."""
    store = await open_store(postgres_url)
    try:
        async with store.write() as tx:
            assert (await tx.connection.execute(_SYNCHRONOUS_COMMIT)).scalar_one() == "on"
        async with store.read() as tx:
            assert (await tx.connection.execute(_SYNCHRONOUS_COMMIT)).scalar_one() == "on"
    finally:
        await store.close()


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(device, inode) of everything fsynced, recorded around the real os.fsync."""
    calls: list[tuple[int, int]] = []
    real_fsync: Callable[[int], None] = os.fsync

    def recording_fsync(fd: int) -> None:
        info = os.fstat(fd)
        calls.append((info.st_dev, info.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return calls


def _identity(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_dev, info.st_ino


def test_a_local_metadata_file_and_every_new_directory_entry_are_synced(
    tmp_path: Path, synced: list[tuple[int, int]]
) -> None:
    target = tmp_path / "wh" / "ns" / "t" / "metadata" / "00000-x.metadata.json"
    fileio.write_new_file(target.as_uri(), b'{"format-version": 2}')
    assert target.read_bytes() == b'{"format-version": 2}'
    # The file, the directory holding it, and each directory that gained a new entry.
    for path in (target, target.parent, tmp_path / "wh" / "ns" / "t", tmp_path / "wh" / "ns", tmp_path):
        assert _identity(path) in synced, path


def test_a_second_file_syncs_only_its_own_directory(tmp_path: Path, synced: list[tuple[int, int]]) -> None:
    directory = tmp_path / "metadata"
    fileio.write_new_file((directory / "00000-a.metadata.json").as_uri(), b"a")
    synced.clear()
    fileio.write_new_file((directory / "00001-b.metadata.json").as_uri(), b"b")
    assert synced == [_identity(directory / "00001-b.metadata.json"), _identity(directory)]


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "00000-a.metadata.json"
    fileio.write_new_file(target.as_uri(), b"first")
    with pytest.raises(StorageUnavailableError, match="collision"):
        fileio.write_new_file(target.as_uri(), b"second")
    assert target.read_bytes() == b"first"
