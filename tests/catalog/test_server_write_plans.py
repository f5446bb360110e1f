"""The server-side writes (catalog.store.server_writes; migrations 0013-0015) look roots up by
index however large the registry grows: a namespace creation, a create and a commit never read the
whole of `object_roots`.

PL/pgSQL keeps a generic plan for each statement after a connection's fifth call, made without the
arrays' contents; an `EXISTS (... root = ANY (array))` then became a sequential scan that stops
at the first match, and the common case has none (migration 0015). The scans are counted by
PostgreSQL itself (`pg_stat_user_tables`), on a registry holding many roots it has not analysed
since they were written (as between two autovacuum runs), over more calls than the planner needs
to switch to its generic plans. With the bodies of 0013 and 0014 the first two tests fail: 25 and
50 sequential scans.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

pytestmark = pytest.mark.postgres

OTHER_ROOTS = 50_000  # namespace directories of another warehouse: what a grown registry holds
CALLS = 30  # well past the five custom plans before a generic one
PLACES_LOCK = 0x726F6F7473
_NAMESPACE_ARGS = ", ".join(f"${i}" for i in range(1, 19))
_CREATE_ARGS = ", ".join(f"${i}" for i in range(1, 29))
_SWAP_ARGS = ", ".join(f"${i}" for i in range(1, 19))


@pytest.fixture
async def conn(pg_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    await connection.execute(
        "INSERT INTO object_roots (root, kind, owner, warehouse) "
        "SELECT convert_to('file:///other/ns' || g || '/', 'UTF8'), 'namespace', 'other/ns' || g, 'other' "
        f"FROM generate_series(1, {OTHER_ROOTS}) AS g"
    )
    try:
        yield connection
    finally:
        await connection.close()


async def _scans(conn: asyncpg.Connection) -> tuple[int, int]:
    """(sequential scans, index scans) of `object_roots` so far, this connection's included."""
    await conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as that statement ends
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(
        "SELECT seq_scan, coalesce(idx_scan, 0) AS idx_scan FROM pg_stat_user_tables "
        "WHERE relname = 'object_roots'"
    )
    assert row is not None
    return int(row["seq_scan"]), int(row["idx_scan"])


def _directory(name: str) -> bytes:
    return f"file:///w/{name}/".encode()


def _ancestors(path: str) -> list[bytes]:
    """The places above a root, as the gateway passes them (catalog.roots.ancestors)."""
    parts = path.rstrip("/").split("/")
    return [("/".join(parts[:i]) + "/").encode() for i in range(3, len(parts))]


async def _create_namespace(conn: asyncpg.Connection, name: str) -> int:
    directory = _directory(name)
    result = await conn.fetchval(
        f"SELECT cedarberg_create_namespace({_NAMESPACE_ARGS})",
        "w", name, None, "{}", 0, directory, _ancestors(directory.decode()), f"w/{name}",
        PLACES_LOCK, [hash(name) % 1000], [True], None, None, None, None, None, None, None,
    )  # fmt: skip
    return int(result)


async def _create_table(conn: asyncpg.Connection, namespace: str, name: str) -> tuple[int, str, str]:
    root = f"file:///w/{namespace}/{name}/"
    table_uuid = str(uuid.uuid4())
    location = f"{root}metadata/0.json"
    result = await conn.fetchval(
        f"SELECT cedarberg_create_object({_CREATE_ARGS})",
        "w", namespace, name, "table", table_uuid, location, b"{}", 1, "local://k", "1", b"key", 0,
        True, "{}", PLACES_LOCK, [hash(name) % 1000], [True], [root.encode()], [root.encode()],
        [root[:-1].encode() + b"0"], _ancestors(root), None, None, None, None, None, None, None,
    )  # fmt: skip
    return int(result), table_uuid, location


async def _swap(
    conn: asyncpg.Connection, namespace: str, name: str, owner: str, expected: str, new: str
) -> int:
    root = f"file:///w/{namespace}/{name}/"
    result = await conn.fetchval(
        f"SELECT cedarberg_swap_version({_SWAP_ARGS})",
        "w", namespace, name, "table", owner, [root.encode()], expected, b"key", new, b"{}", 0,
        None, None, None, None, None, None, None,
    )  # fmt: skip
    return int(result)


async def _assert_no_scan_of_roots(conn: asyncpg.Connection, before: tuple[int, int]) -> None:
    seq_scans, index_scans = await _scans(conn)
    assert seq_scans == before[0], f"{seq_scans - before[0]} sequential scans of object_roots"
    assert index_scans > before[1]


async def test_namespace_creations_look_roots_up_by_index(conn: asyncpg.Connection) -> None:
    before = await _scans(conn)
    results = [await _create_namespace(conn, f"ns{i}") for i in range(CALLS)]
    assert results == [0] * CALLS
    await _assert_no_scan_of_roots(conn, before)
    assert await conn.fetchval("SELECT count(*) FROM namespaces WHERE warehouse = 'w'") == CALLS


async def test_creates_and_commits_look_roots_up_by_index(conn: asyncpg.Connection) -> None:
    assert await _create_namespace(conn, "ns") == 0
    before = await _scans(conn)
    created = [await _create_table(conn, "ns", f"t{i}") for i in range(CALLS)]
    assert [outcome for outcome, _, _ in created] == [0] * CALLS
    _, owner, location = created[0]
    for version in range(1, CALLS + 1):
        new = location.replace("0.json", f"{version}.json")
        assert await _swap(conn, "ns", "t0", owner, location, new) == 0
        location = new
    await _assert_no_scan_of_roots(conn, before)


async def test_the_checks_still_refuse_what_they_refused(conn: asyncpg.Connection) -> None:
    """Control: the lookups find what the scans found. A table's root under a new namespace's
    directory sends the creation to the general path (2); a table root already recorded, or one
    with a recorded root below it, sends a create there too; a root the object does not hold sends
    a commit there; a moved pointer is a lost race (1)."""
    assert await _create_namespace(conn, "ns") == 0
    outcome, owner, location = await _create_table(conn, "ns", "t")
    assert outcome == 0
    # A namespace whose directory lies inside the table's.
    inside: Any = await conn.fetchval(
        f"SELECT cedarberg_create_namespace({_NAMESPACE_ARGS})",
        "w", "ns.t.x", None, "{}", 0, b"file:///w/ns/t/x/", _ancestors("file:///w/ns/t/x/"), "w/ns.t.x",
        PLACES_LOCK, [1], [True], None, None, None, None, None, None, None,
    )  # fmt: skip
    assert inside == 2
    # The same root again, and a root with a recorded root below it.
    assert (await _create_table(conn, "ns", "t"))[0] == 2
    await conn.execute(
        "INSERT INTO object_roots VALUES (convert_to('file:///w/ns/u/deep/', 'UTF8'), 'table', 'x', 'w')"
    )
    assert (await _create_table(conn, "ns", "u"))[0] == 2
    # A commit naming a root the table does not hold, and one on a moved pointer.
    assert await _swap(conn, "ns", "t", str(uuid.uuid4()), location, location + ".1") == 2
    assert await _swap(conn, "ns", "t", owner, location + ".stale", location + ".2") == 1
    assert await _swap(conn, "ns", "t", owner, location, location + ".3") == 0
    moved = await conn.fetchval("SELECT metadata_location FROM catalog_objects WHERE name = 't'")
    assert moved == location + ".3"
