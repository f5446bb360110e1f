"""The commit algorithm (`catalog.commits`) for both kinds of object, on a real catalog (SQLite,
local KEK, sealing warehouse): lost races, unknown outcomes, failed requirements, gate
refusals, and the in-process commit lock; and drops (plain warehouse), which race commits through
the same retry (`catalog.lost_races`): a drop deletes only the version it read.

A race with "another process" is a second `CatalogContext` on the same registry with its own
commit locks, committing from inside the first commit's gate: after the first planned, before
it writes or swaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from cedarberg.catalog import commits, table_changes, view_changes
from cedarberg.catalog import requests as req
from cedarberg.catalog.commit_locks import CommitLocks
from cedarberg.catalog.context import CatalogContext, Limits
from cedarberg.catalog.effects import Effect
from cedarberg.catalog.errors import CommitFailedError, CommitStateUnknownError, ForbiddenError
from cedarberg.catalog.idempotency import Body
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import TABLE, VIEW
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as root_rows
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.tables import TableService
from cedarberg.catalog.views import ViewService
from tests.support.catalogs import WAREHOUSE, RacedStore, UnconfirmedStore, catalog_context

NAMESPACE = Namespace.of(["ns"])
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1,
    "summary": {},
    "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
    "default-namespace": ["ns"],
}
Plan = Callable[[], Awaitable[list[commits.PlannedChange[Any]]]]
Gate = Callable[[Sequence[Effect]], Awaitable[None]]


async def allow(_effects: Sequence[Effect]) -> None:
    """A gate that allows everything."""


async def refuse(_effects: Sequence[Effect]) -> None:
    raise ForbiddenError("refused by the test's gate")


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of object, driven through its service and through its planner."""

    name: str  # TABLE or VIEW

    def identifier(self) -> Identifier:
        return Identifier.of(NAMESPACE, f"my_{self.name}")

    async def create(self, ctx: CatalogContext, gate: Gate = allow) -> Body:
        name = self.identifier().name
        if self.name == TABLE:
            table = req.parse(req.CreateTableRequest, {"name": name, "schema": SCHEMA})
            return await TableService(ctx).create(None, NAMESPACE, table, None, gate)
        view = req.parse(
            req.CreateViewRequest, {"name": name, "schema": SCHEMA, "view-version": VIEW_VERSION}
        )
        return await ViewService(ctx).create(None, NAMESPACE, view, None, gate)

    async def drop(self, ctx: CatalogContext) -> None:
        if self.name == TABLE:
            await TableService(ctx).drop(None, self.identifier(), False, None)
        else:
            await ViewService(ctx).drop(None, self.identifier(), None)

    def _request(self, properties: dict[str, str], uuid: str | None) -> dict[str, object]:
        requirements = [] if uuid is None else [{"type": f"assert-{self.name}-uuid", "uuid": uuid}]
        return {
            "requirements": requirements,
            "updates": [{"action": "set-properties", "updates": properties}],
        }

    async def change(
        self,
        ctx: CatalogContext,
        properties: dict[str, str],
        uuid: str | None = None,
        gate: Gate = allow,
    ) -> Body:
        """Set `properties` through the service (requiring `uuid` when given)."""
        if self.name == TABLE:
            table = req.parse(req.CommitTableRequest, self._request(properties, uuid))
            return await TableService(ctx).commit(None, self.identifier(), table, None, gate)
        view = req.parse(req.CommitViewRequest, self._request(properties, uuid))
        return await ViewService(ctx).replace(None, self.identifier(), view, None, gate)

    def planner(self, ctx: CatalogContext, properties: dict[str, str], uuid: str | None = None) -> Plan:
        """The planner of a change setting `properties`, as the service builds it."""
        warehouse = ctx.warehouse(None)
        identifier = self.identifier()

        async def plan_table() -> list[commits.PlannedChange[Any]]:
            async with ctx.store.read() as tx:
                row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, identifier.name)
            current = await table_changes.open_table(ctx, row)
            table = req.parse(req.CommitTableRequest, self._request(properties, uuid))
            basis = table_changes.Basis(current, {})
            change = await table_changes.plan_change(ctx, warehouse, identifier, basis, table)
            return [] if change is None else [change]

        async def plan_view() -> list[commits.PlannedChange[Any]]:
            view = req.parse(req.CommitViewRequest, self._request(properties, uuid))
            return [await view_changes.plan_replace(ctx, warehouse, identifier, view)]

        return plan_table if self.name == TABLE else plan_view


KINDS = [Kind(TABLE), Kind(VIEW)]


@pytest.fixture
async def ctx(tmp_path: Path, registry_url: str) -> AsyncIterator[CatalogContext]:
    async with catalog_context(tmp_path, url=registry_url, store_class=UnconfirmedStore) as opened:
        await NamespaceService(opened).create(None, NAMESPACE, {}, None)
        yield opened


def metadata_files(tmp_path: Path) -> set[Path]:
    return set((tmp_path / "warehouse").rglob("*.metadata.json"))


async def pointer(ctx: CatalogContext, kind: Kind) -> ObjectRow:
    async with ctx.store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, kind.identifier().name)
    assert row is not None
    return row


async def properties(ctx: CatalogContext, kind: Kind) -> dict[str, str]:
    metadata = orjson.loads(await ctx.sealer.open_row(await pointer(ctx, kind)))
    return dict(metadata["properties"])


def another_process(ctx: CatalogContext) -> CatalogContext:
    """A catalog on the same registry and warehouse with its own commit locks."""
    return dataclasses.replace(ctx, commit_locks=CommitLocks())


def local_path(location: str) -> Path:
    return Path(location.removeprefix("file://"))


# -- lost races ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_lost_race_is_planned_again_on_the_newer_metadata_and_lands(
    ctx: CatalogContext, kind: Kind
) -> None:
    await kind.create(ctx)
    planned: list[str] = []
    inner = kind.planner(ctx, {"mine": "1"})

    async def plan() -> list[commits.PlannedChange[Any]]:
        changes = await inner()
        planned.extend(change.metadata_location for change in changes)
        return changes

    async def racing_gate(effects: Sequence[Effect]) -> None:
        if len(planned) == 1:  # the first attempt: another process commits before the swap
            await kind.change(another_process(ctx), {"theirs": "1"})

    body = await commits.commit(
        ctx,
        ctx.warehouse(None),
        commits.CommitJob([kind.identifier()], plan, lambda changes: commits.commit_response(changes[0])),
        racing_gate,
    )

    assert len(planned) == 2
    lost, landed = (local_path(location) for location in planned)
    assert not lost.exists()  # the losing attempt's file is deleted
    assert landed.exists()
    assert (await pointer(ctx, kind)).metadata_location == planned[1]
    assert await properties(ctx, kind) == {"theirs": "1", "mine": "1"}
    assert body is not None
    assert orjson.loads(body)["metadata-location"] == planned[1]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_requirement_that_a_race_broke_fails_the_commit_and_leaves_nothing_behind(
    ctx: CatalogContext, kind: Kind, tmp_path: Path
) -> None:
    await kind.create(ctx)
    uuid = (await pointer(ctx, kind)).uuid
    other = another_process(ctx)
    planned: list[str] = []
    inner = kind.planner(ctx, {"mine": "1"}, uuid)

    async def plan() -> list[commits.PlannedChange[Any]]:
        changes = await inner()
        planned.extend(change.metadata_location for change in changes)
        return changes

    before: set[Path] = set()

    async def racing_gate(effects: Sequence[Effect]) -> None:
        # Another process replaces the object by a new one of the same name (a new UUID).
        await kind.drop(other)
        await kind.create(other)
        before.update(metadata_files(tmp_path))

    with pytest.raises(CommitFailedError, match="UUID"):
        await commits.commit(
            ctx,
            ctx.warehouse(None),
            commits.CommitJob([kind.identifier()], plan, lambda changes: commits.commit_response(changes[0])),
            racing_gate,
        )

    assert len(planned) == 1  # the second plan failed its requirement before writing anything
    assert not local_path(planned[0]).exists()
    assert metadata_files(tmp_path) == before  # as the other process left them
    row = await pointer(ctx, kind)
    assert row.uuid != uuid
    assert await properties(ctx, kind) == {}


# -- unknown outcome -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_an_unknown_outcome_keeps_the_new_metadata_file(
    ctx: CatalogContext, kind: Kind, tmp_path: Path
) -> None:
    await kind.create(ctx)
    before = metadata_files(tmp_path)
    assert isinstance(ctx.store, UnconfirmedStore)
    ctx.store.unconfirm_next = True

    with pytest.raises(CommitStateUnknownError):
        await kind.change(ctx, {"mine": "1"})

    # The swap landed: the registry names the new file, which must still be there.
    row = await pointer(ctx, kind)
    new_files = metadata_files(tmp_path) - before
    assert new_files == {local_path(row.metadata_location)}
    assert await properties(ctx, kind) == {"mine": "1"}


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_an_unknown_outcome_of_a_create_keeps_the_new_metadata_file(
    ctx: CatalogContext, kind: Kind, tmp_path: Path
) -> None:
    assert isinstance(ctx.store, UnconfirmedStore)
    ctx.store.unconfirm_next = True

    with pytest.raises(CommitStateUnknownError):
        await kind.create(ctx)

    row = await pointer(ctx, kind)
    assert metadata_files(tmp_path) == {local_path(row.metadata_location)}


# -- failed requirement, refused effect ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_failed_requirement_writes_nothing_and_leaves_the_registry_unchanged(
    ctx: CatalogContext, kind: Kind, tmp_path: Path
) -> None:
    await kind.create(ctx)
    before_files, before_row = metadata_files(tmp_path), await pointer(ctx, kind)

    with pytest.raises(CommitFailedError, match="UUID"):
        await kind.change(ctx, {"mine": "1"}, uuid="00000000-0000-0000-0000-000000000000")

    assert metadata_files(tmp_path) == before_files
    assert await pointer(ctx, kind) == before_row


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_refused_effect_writes_nothing(ctx: CatalogContext, kind: Kind, tmp_path: Path) -> None:
    with pytest.raises(ForbiddenError):
        await kind.create(ctx, refuse)
    assert metadata_files(tmp_path) == set()
    async with ctx.store.read() as tx:
        assert await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, kind.identifier().name) is None

    await kind.create(ctx)
    before_files, before_row = metadata_files(tmp_path), await pointer(ctx, kind)
    with pytest.raises(ForbiddenError):
        await kind.change(ctx, {"mine": "1"}, gate=refuse)
    assert metadata_files(tmp_path) == before_files
    assert await pointer(ctx, kind) == before_row


# -- the commit lock -----------------------------------------------------------------------------


async def test_concurrent_view_replaces_in_one_process_run_one_at_a_time(
    tmp_path: Path, registry_url: str
) -> None:
    kind = Kind(VIEW)
    # One attempt each: a replace that raced another would fail instead of retrying.
    async with catalog_context(tmp_path, url=registry_url, limits=Limits(commit_retries=1)) as ctx:
        await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
        await kind.create(ctx)
        in_gate = 0
        most_in_gate = 0

        async def slow_gate(effects: Sequence[Effect]) -> None:
            nonlocal in_gate, most_in_gate
            in_gate += 1
            most_in_gate = max(most_in_gate, in_gate)
            await asyncio.sleep(0.01)  # room for another replace to plan meanwhile, were it not locked
            in_gate -= 1

        await asyncio.gather(*(kind.change(ctx, {f"p{i}": "1"}, gate=slow_gate) for i in range(5)))

        assert most_in_gate == 1
        assert await properties(ctx, kind) == {f"p{i}": "1" for i in range(5)}


# -- drops race commits as commits race each other ---------------------------------------------


@contextlib.asynccontextmanager
async def raced(tmp_path: Path, registry_url: str, retries: int) -> AsyncIterator[CatalogContext]:
    """A plain (not sealing) catalog whose next write transaction is preceded by the test's race."""
    async with catalog_context(
        tmp_path,
        url=registry_url,
        store_class=RacedStore,
        limits=Limits(commit_retries=retries),
        seal_files=False,
    ) as opened:
        await NamespaceService(opened).create(None, NAMESPACE, {}, None)
        yield opened


def race_next_write(ctx: CatalogContext, racing: Callable[[], Awaitable[object]]) -> None:
    async def run() -> None:
        await racing()

    assert isinstance(ctx.store, RacedStore)
    ctx.store.before_next_write = run


async def held_roots(ctx: CatalogContext, kind: Kind, uuid: str) -> list[str]:
    async with ctx.store.read() as tx:
        return await root_rows.held(tx, kind.name, uuid)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_drop_that_a_commit_raced_fails_like_a_commit_once_retries_run_out(
    tmp_path: Path, registry_url: str, kind: Kind
) -> None:
    async with raced(tmp_path, registry_url, retries=1) as ctx:
        await kind.create(ctx)
        # Another writer commits after the drop read the object and before it deletes it.
        race_next_write(ctx, lambda: kind.change(another_process(ctx), {"theirs": "1"}))

        with pytest.raises(CommitFailedError, match="changed concurrently too many times; retry the drop"):
            await kind.drop(ctx)

        assert await properties(ctx, kind) == {"theirs": "1"}  # the newer version stays


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_drop_that_a_replacement_raced_drops_the_object_it_finds_and_frees_its_roots(
    tmp_path: Path, registry_url: str, kind: Kind
) -> None:
    async with raced(tmp_path, registry_url, retries=4) as ctx:
        await kind.create(ctx)
        first = (await pointer(ctx, kind)).uuid
        other = another_process(ctx)
        replacement: list[str] = []

        async def replace_it() -> None:
            await kind.drop(other)
            await kind.create(other)
            replacement.append((await pointer(other, kind)).uuid)

        race_next_write(ctx, replace_it)
        await kind.drop(ctx)

        async with ctx.store.read() as tx:
            assert await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, kind.identifier().name) is None
        assert replacement
        assert replacement[0] != first
        # The roots forgotten are those of the object deleted: nothing stays claimed for either.
        assert await held_roots(ctx, kind, replacement[0]) == []
        assert await held_roots(ctx, kind, first) == []


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
async def test_a_plain_drop_removes_the_object_and_its_roots(
    tmp_path: Path, registry_url: str, kind: Kind
) -> None:
    async with raced(tmp_path, registry_url, retries=4) as ctx:
        await kind.create(ctx)
        uuid = (await pointer(ctx, kind)).uuid
        assert await held_roots(ctx, kind, uuid) != []

        await kind.drop(ctx)

        async with ctx.store.read() as tx:
            assert await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, kind.identifier().name) is None
        assert await held_roots(ctx, kind, uuid) == []


# -- a registration over a table is a commit too ------------------------------------------------


async def register_over(ctx: CatalogContext, metadata_location: str, gate: Gate) -> Body:
    """Register `metadata_location` at the table of TABLE_KIND, replacing it (`overwrite`)."""
    request = req.parse(
        req.RegisterTableRequest,
        {"name": TABLE_KIND.identifier().name, "metadata-location": metadata_location, "overwrite": True},
    )
    return await TableService(ctx).register(None, NAMESPACE, request, None, gate)


TABLE_KIND = Kind(TABLE)


async def test_a_registration_over_a_table_that_a_commit_raced_is_judged_again_on_the_newer_version(
    tmp_path: Path, registry_url: str
) -> None:
    async with raced(tmp_path, registry_url, retries=4) as ctx:
        await TABLE_KIND.create(ctx)
        first = await pointer(ctx, TABLE_KIND)
        await TABLE_KIND.change(ctx, {"v": "1"})
        judged: list[Sequence[Effect]] = []

        async def recording_gate(effects: Sequence[Effect]) -> None:
            judged.append(effects)

        # Another writer commits to the table after the registration judged replacing it.
        race_next_write(ctx, lambda: TABLE_KIND.change(another_process(ctx), {"theirs": "1"}))
        body = await register_over(ctx, first.metadata_location, recording_gate)

        assert len(judged) == 2  # the departure of the newer version was judged before it went
        assert all(len(effects) == 2 for effects in judged)  # the arrival, then the departure
        row = await pointer(ctx, TABLE_KIND)
        assert row.metadata_location == first.metadata_location
        assert row.uuid == first.uuid
        assert await properties(ctx, TABLE_KIND) == {}
        assert body is not None
        assert orjson.loads(body)["metadata-location"] == first.metadata_location


async def test_a_registration_over_a_table_that_keeps_changing_fails_and_leaves_it(
    tmp_path: Path, registry_url: str
) -> None:
    async with raced(tmp_path, registry_url, retries=1) as ctx:
        await TABLE_KIND.create(ctx)
        first = await pointer(ctx, TABLE_KIND)
        await TABLE_KIND.change(ctx, {"v": "1"})
        race_next_write(ctx, lambda: TABLE_KIND.change(another_process(ctx), {"theirs": "1"}))

        with pytest.raises(CommitFailedError, match="table changed concurrently too many times"):
            await register_over(ctx, first.metadata_location, allow)

        assert await properties(ctx, TABLE_KIND) == {"v": "1", "theirs": "1"}  # not replaced


async def test_a_registration_over_a_table_replaces_it_with_its_earlier_metadata(
    tmp_path: Path, registry_url: str
) -> None:
    async with raced(tmp_path, registry_url, retries=4) as ctx:
        await TABLE_KIND.create(ctx)
        first = await pointer(ctx, TABLE_KIND)
        await TABLE_KIND.change(ctx, {"v": "1"})

        await register_over(ctx, first.metadata_location, allow)

        row = await pointer(ctx, TABLE_KIND)
        assert row.metadata_location == first.metadata_location
        assert await properties(ctx, TABLE_KIND) == {}
        assert await held_roots(ctx, TABLE_KIND, row.uuid) != []


async def test_a_commit_planned_before_its_table_was_dropped_and_registered_again_is_planned_again(
    tmp_path: Path, registry_url: str
) -> None:
    """A metadata file's location does not name a version: a table dropped and its last file
    registered again at the same name has the same one, with a new data key. A commit planned on
    the row read before loses the swap and is planned on the registered table (it used to land,
    sealing the registry's copy under the dropped table's key: the table could not be opened)."""
    async with raced(tmp_path, registry_url, retries=4) as ctx:
        await TABLE_KIND.create(ctx)
        before = await pointer(ctx, TABLE_KIND)
        other = another_process(ctx)
        planned: list[str] = []
        inner = TABLE_KIND.planner(ctx, {"mine": "1"})

        async def plan() -> list[commits.PlannedChange[Any]]:
            changes = await inner()
            planned.extend(change.base.wrapped_key.hex() for change in changes if change.base)
            return changes

        async def racing_gate(effects: Sequence[Effect]) -> None:
            if len(planned) == 1:
                await TABLE_KIND.drop(other)
                await register_over(other, before.metadata_location, allow)

        await commits.commit(
            ctx,
            ctx.warehouse(None),
            commits.CommitJob([TABLE_KIND.identifier()], plan, lambda changes: None),
            racing_gate,
        )

        row = await pointer(ctx, TABLE_KIND)
        assert len(planned) == 2
        assert planned[0] == before.wrapped_key.hex()
        assert planned[1] == row.wrapped_key.hex() != before.wrapped_key.hex()
        assert await properties(ctx, TABLE_KIND) == {"mine": "1"}  # opens under its own key
