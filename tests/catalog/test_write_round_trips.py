"""Writes on PostgreSQL in one round trip (issue 32 §2): a table commit, a create and a namespace
creation are each one statement, a server-side function run in autocommit
(`catalog.store.server_writes`, migrations 0013 and 0014), with no BEGIN or COMMIT around it; the
compare-and-swap and the location rule hold inside that statement exactly as in the transaction.

Round trips are counted on the real driver: every statement asyncpg sends is recorded (a
statement asyncpg has prepared on its connection is one round trip).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from sqlalchemy import Integer, column, text

from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.errors import (
    AlreadyExistsError,
    CommitFailedError,
    InvalidRequestError,
    LocationNotAllowedError,
)
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as rows
from cedarberg.catalog.store import server_writes
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.server_writes import NewVersion, Outcome, Placement
from cedarberg.catalog.store.statements import Sql
from cedarberg.catalog.tables import TableService
from tests.support.catalogs import WAREHOUSE, catalog_context

pytestmark = pytest.mark.postgres

NAMESPACE = Namespace.of(["ns"])
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")


class Sent:
    """Every statement asyncpg sent while the fixture is installed, in order."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def during(self, start: int) -> list[str]:
        return self.statements[start:]


def writes(statements: list[str]) -> list[str]:
    """The statements that are not plain reads."""
    return [sql for sql in statements if not sql.startswith("SELECT") or "cedarberg_" in sql]


def _counting(record: Sent, original: Callable[..., Any]) -> Callable[..., Any]:
    def counted(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        record.statements.append(" ".join(query.split()))
        return original(self, query, *args, **kwargs)

    return counted


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    record = Sent()
    connection = asyncpg.connection.Connection
    for method in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        monkeypatch.setattr(connection, method, _counting(record, getattr(connection, method)))
    return record


@pytest.fixture
async def ctx(tmp_path: Path, pg_url: str) -> AsyncIterator[CatalogContext]:
    async with catalog_context(tmp_path, url=pg_url) as opened:
        yield opened


async def allow(_effects: Any) -> None:
    """A gate that allows everything."""


def create_request(name: str, location: str | None = None) -> req.CreateTableRequest:
    body: dict[str, Any] = {"name": name, "schema": SCHEMA}
    if location is not None:
        body["location"] = location
    return req.parse(req.CreateTableRequest, body)


def set_property(key: str) -> req.CommitTableRequest:
    return req.parse(
        req.CommitTableRequest,
        {"requirements": [], "updates": [{"action": "set-properties", "updates": {key: "1"}}]},
    )


async def table_location(ctx: CatalogContext, name: str) -> str:
    async with ctx.store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, name)
    assert row is not None
    return str(orjson.loads(await ctx.sealer.open_row(row))["location"])


# -- one round trip per write (control) --------------------------------------------------------


async def test_a_namespace_creation_is_one_statement_and_no_transaction(
    ctx: CatalogContext, sent: Sent
) -> None:
    start = len(sent.statements)
    await NamespaceService(ctx).create(None, NAMESPACE, {"owner": "me"}, None)
    statements = sent.during(start)

    assert len(statements) == 1
    assert statements[0].startswith("SELECT cedarberg_create_namespace(")
    async with ctx.store.read() as tx:
        assert await namespace_rows.get_namespace(tx, WAREHOUSE, NAMESPACE.key) == {"owner": "me"}
        owner = rows.namespace_owner(WAREHOUSE, NAMESPACE.key)
        assert await rows.held(tx, rows.NAMESPACE, owner) == [f"{ctx.warehouse(None).location}/ns"]


async def test_a_table_create_and_a_commit_each_write_in_one_statement(
    ctx: CatalogContext, sent: Sent
) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    service = TableService(ctx)

    start = len(sent.statements)
    await service.create(None, NAMESPACE, create_request("t"), None, allow)
    create = sent.during(start)
    start = len(sent.statements)
    await service.commit(None, Identifier.of(NAMESPACE, "t"), set_property("a"), None, allow)
    commit = sent.during(start)

    for statements, function in ((create, "cedarberg_create_object"), (commit, "cedarberg_swap_version")):
        assert writes(statements) == [statements[-1]]
        assert statements[-1].startswith(f"SELECT {function}(")
        assert not [sql for sql in statements if sql.split(" ")[0] in _TRANSACTION_CONTROL]
    # The commit's other round trip is its plan's read in autocommit: the pointer and the
    # properties (grants) of its namespace chain, in one statement (the gate decides on them).
    assert len(commit) == 2
    assert "ns_properties" in commit[0]
    assert "catalog_objects" in commit[0]
    location = await table_location(ctx, "t")
    async with ctx.store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, "t")
        assert row is not None
        assert row.version == 1
        assert await rows.held(tx, "table", row.uuid) == [location]
    assert orjson.loads(await ctx.sealer.open_row(row))["properties"] == {"a": "1"}


async def test_an_idempotency_record_is_written_in_the_same_statement(
    ctx: CatalogContext, sent: Sent
) -> None:
    key = str(uuid.uuid4())
    service = NamespaceService(ctx)

    async def create(rec: Any) -> bytes | None:
        return await service.create(None, NAMESPACE, {}, rec)

    async def warm_up(rec: Any) -> bytes | None:
        return await service.create(None, Namespace.of(["first"]), {}, rec)

    # The registry's data key (sealing every record) is created once, by the first keyed request.
    await ctx.idempotency.run(str(uuid.uuid4()), "createNamespace", warm_up, caller="alice", request=b"0")
    start = len(sent.statements)
    first = await ctx.idempotency.run(key, "createNamespace", create, caller="alice", request=b"r")
    assert writes(sent.during(start)) == [sent.during(start)[-1]]
    assert "cedarberg_create_namespace" in sent.during(start)[-1]

    start = len(sent.statements)
    again = await ctx.idempotency.run(key, "createNamespace", create, caller="alice", request=b"r")
    assert again == first
    assert writes(sent.during(start)) == []  # replayed from the record the statement wrote


async def test_statements_are_prepared_once_per_connection(ctx: CatalogContext) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    for name in ("a", "b", "c"):
        await NamespaceService(ctx).create(None, Namespace.of(["ns", name]), {}, None)
    async with ctx.store.read() as tx:
        prepared = await tx.connection.execute(_PREPARED_CREATES)
    assert prepared.scalar() == 1


# -- the same rules inside the statement (attack) ----------------------------------------------


async def test_a_stale_base_is_a_lost_race_and_changes_nothing(ctx: CatalogContext) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    service = TableService(ctx)
    await service.create(None, NAMESPACE, create_request("t"), None, allow)
    stale = await _row(ctx.store, "t")
    await service.commit(None, Identifier.of(NAMESPACE, "t"), set_property("a"), None, allow)
    current = await _row(ctx.store, "t")

    location = await table_location(ctx, "t")
    new = NewVersion(stale.metadata_location + ".x", b"sealed", [location])
    outcome = await server_writes.swap_object(ctx.store, stale, new, None)

    assert outcome is Outcome.LOST_RACE
    assert await _row(ctx.store, "t") == current


async def test_a_commit_that_keeps_losing_the_race_fails_with_commit_failed(ctx: CatalogContext) -> None:
    """Another writer moves the pointer between every plan and its swap: the statement refuses
    each swap, and after the retries the client is told to reload (409), nothing half-done."""
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    service = TableService(ctx)
    await service.create(None, NAMESPACE, create_request("t"), None, allow)
    other = replace(ctx, commit_locks=type(ctx.commit_locks)())
    moves = 0

    async def racing_gate(_effects: Any) -> None:
        nonlocal moves
        moves += 1
        await TableService(other).commit(
            None, Identifier.of(NAMESPACE, "t"), set_property(f"o{moves}"), None, allow
        )

    with pytest.raises(CommitFailedError):
        await service.commit(None, Identifier.of(NAMESPACE, "t"), set_property("mine"), None, racing_gate)
    row = await _row(ctx.store, "t")
    properties = orjson.loads(await ctx.sealer.open_row(row))["properties"]
    assert "mine" not in properties
    assert row.version == moves


async def test_a_create_near_recorded_roots_writes_nothing(ctx: CatalogContext) -> None:
    """Every way a new root can meet a recorded one (the same place; below a table's root; above
    a table's root or a namespace directory) answers GENERAL with nothing written, so the
    transaction refuses it as it always did; a namespace directory above it is where objects belong."""
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    await NamespaceService(ctx).create(None, Namespace.of(["ns", "inner"]), {}, None)
    await TableService(ctx).create(None, NAMESPACE, create_request("t"), None, allow)
    taken = await table_location(ctx, "t")
    ns_dir = f"{ctx.warehouse(None).location}/ns"
    async with ctx.store.write() as tx:
        await rows.add(tx, WAREHOUSE, "view", str(uuid.uuid4()), [f"{ns_dir}/deep/v"])
        await rows.add(tx, WAREHOUSE, rows.NAMESPACE, "elsewhere", [f"{ns_dir}/holder/dir"])

    meeting = {
        "the same root": [taken],
        "inside a table": [f"{taken}/sub"],
        "above a view": [f"{ns_dir}/deep"],
        "a namespace directory": [f"{ns_dir}/inner"],
        "above a namespace directory": [f"{ns_dir}/holder"],
        "one free root and one taken": [f"{ns_dir}/free-{uuid.uuid4().hex}", taken],
    }
    for how, roots in meeting.items():
        outcome = await server_writes.insert_object(ctx.store, _new_row("n"), Placement(roots, {}), None)
        assert outcome is Outcome.GENERAL, how
    async with ctx.store.read() as tx:
        assert await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, "n") is None
        assert await rows.held(tx, "table", _UUID) == []

    free = f"{ns_dir}/n-{uuid.uuid4().hex}"
    assert (
        await server_writes.insert_object(ctx.store, _new_row("n"), Placement([free], {}), None)
        is Outcome.DONE
    )
    async with ctx.store.read() as tx:
        assert await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, "n") is not None
        assert await rows.held(tx, "table", _UUID) == [free]


async def test_a_create_placed_on_stale_namespace_properties_writes_nothing(ctx: CatalogContext) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {"a": "1"}, None)
    free = f"{ctx.warehouse(None).location}/ns/n-{uuid.uuid4().hex}"

    outcome = await server_writes.insert_object(ctx.store, _new_row("n"), Placement([free], {"a": "0"}), None)

    assert outcome is Outcome.GENERAL
    async with ctx.store.read() as tx:
        assert await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, "n") is None


async def test_a_name_taken_since_the_plan_is_a_lost_race(ctx: CatalogContext) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    await TableService(ctx).create(None, NAMESPACE, create_request("t"), None, allow)
    before = await _row(ctx.store, "t")
    free = f"{ctx.warehouse(None).location}/ns/t-{uuid.uuid4().hex}"

    outcome = await server_writes.insert_object(ctx.store, _new_row("t"), Placement([free], {}), None)

    assert outcome is Outcome.LOST_RACE
    assert await _row(ctx.store, "t") == before
    with pytest.raises(AlreadyExistsError):
        await TableService(ctx).create(None, NAMESPACE, create_request("t"), None, allow)


async def test_a_namespace_directory_inside_a_table_is_refused_with_nothing_written(
    ctx: CatalogContext,
) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    await TableService(ctx).create(None, NAMESPACE, create_request("t"), None, allow)
    inside = f"{await table_location(ctx, 't')}/data"

    with pytest.raises(LocationNotAllowedError):
        await NamespaceService(ctx).create(None, Namespace.of(["other"]), {"location": inside}, None)
    async with ctx.store.read() as tx:
        assert await namespace_rows.get_namespace(tx, WAREHOUSE, "other") is None
        assert await rows.held(tx, rows.NAMESPACE, rows.namespace_owner(WAREHOUSE, "other")) == []


async def test_a_namespace_taken_or_without_parent_is_refused_as_before(ctx: CatalogContext) -> None:
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    with pytest.raises(AlreadyExistsError, match="Namespace already exists"):
        await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    with pytest.raises(InvalidRequestError, match="parent namespace does not exist"):
        await NamespaceService(ctx).create(None, Namespace.of(["none", "child"]), {}, None)
    async with ctx.store.read() as tx:
        assert await namespace_rows.list_namespaces(tx, WAREHOUSE, None, None, 10) == [NAMESPACE.key]


_UUID = str(uuid.uuid4())
_PREPARED_CREATES = Sql(
    text(
        "SELECT count(*) AS n FROM pg_prepared_statements"
        " WHERE statement LIKE 'SELECT cedarberg_create_namespace(%'"
    ).columns(column("n", Integer))
)


def _new_row(name: str) -> ObjectRow:
    return ObjectRow(
        WAREHOUSE, NAMESPACE.key, name, "table", _UUID, f"file:///m/{name}.json", b"sealed", 0, "k", "1", b"w"
    )


async def _row(store: Store, name: str) -> ObjectRow:
    async with store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, name)
    assert row is not None
    return row


async def test_only_claims_at_overlapping_places_wait_for_each_other(ctx: CatalogContext) -> None:
    """While a transaction holds the locks of a claim at `<ns>/held`, a namespace created
    elsewhere lands (disjoint places share no exclusive lock, so their commits can share a WAL
    flush), and one whose directory lies below the held place waits for it, then is decided on
    what it committed."""
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    warehouse = ctx.warehouse(None)
    held = f"{warehouse.location}/ns/held-{uuid.uuid4().hex}"
    below = Namespace.of(["below"])
    elsewhere = Namespace.of(["elsewhere"])

    async with ctx.store.write() as tx:
        await rows.lock(tx, [held])
        waiting = asyncio.create_task(
            NamespaceService(ctx).create(None, below, {"location": f"{held}/x"}, None)
        )
        await asyncio.wait_for(NamespaceService(ctx).create(None, elsewhere, {}, None), timeout=60)
        assert not waiting.done()
        await rows.add(tx, warehouse.name, "table", str(uuid.uuid4()), [held])

    with pytest.raises(LocationNotAllowedError):
        await asyncio.wait_for(waiting, timeout=60)
    async with ctx.store.read() as tx:
        assert await namespace_rows.get_namespace(tx, WAREHOUSE, elsewhere.key) == {}
        assert await namespace_rows.get_namespace(tx, WAREHOUSE, below.key) is None


def test_a_root_locks_itself_exclusive_and_every_place_above_it_shared() -> None:
    keys, exclusive = rows.place_locks(["s3://b/w/ns/t", "s3://b/w/ns/t/data"])
    by_key = dict(zip(keys, exclusive, strict=True))
    assert keys == sorted(keys)  # one order for every claim: no cycle of waits
    assert len(by_key) == 5  # s3://b, s3://b/w, s3://b/w/ns, .../t, .../t/data
    assert sum(by_key.values()) == 2  # the two roots; the places above them shared
    namespace_keys, namespace_exclusive = rows.place_locks(["s3://b/w/ns"])
    own = [key for key, mine in zip(namespace_keys, namespace_exclusive, strict=True) if mine]
    assert len(own) == 1
    assert by_key[own[0]] is False  # a namespace directory above the table: shared by the table
