"""What tables and views share: lookup by kind, listing and renaming."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog import documents, effects
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.effects import EffectGate
from cedarberg.catalog.errors import (
    AlreadyExistsError,
    NoSuchTableError,
    NoSuchViewError,
    NotFoundError,
)
from cedarberg.catalog.idempotency import Recorder
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lost_races import PointerMoved, retry_lost_races
from cedarberg.catalog.namespaces import read_namespace, require_namespace
from cedarberg.catalog.pagination import PageRequest, Scope, fetch_page
from cedarberg.catalog.store import commit_reads
from cedarberg.catalog.store.cache import RegistryKey
from cedarberg.catalog.store.commit_reads import ObjectInChain
from cedarberg.catalog.store.sql import ObjectRow, Store, StoreTx

TABLE = "table"
VIEW = "view"
_MISSING: dict[str, type[NotFoundError]] = {TABLE: NoSuchTableError, VIEW: NoSuchViewError}


def name_taken(identifier: Identifier, existing_kind: str, wanted_kind: str) -> AlreadyExistsError:
    """The error for creating a `wanted_kind` where an `existing_kind` has the name, worded as
    Iceberg's reference catalog words it (engines show it to people; Iceberg's compatibility kit
    asserts it): "Table already exists: ns.t", "View with same name already exists: ns.v"."""
    if existing_kind == wanted_kind:
        return AlreadyExistsError(f"{existing_kind.capitalize()} already exists: {identifier}")
    return AlreadyExistsError(f"{existing_kind.capitalize()} with same name already exists: {identifier}")


def rename_target_taken(move: Move, existing_kind: str) -> AlreadyExistsError:
    """The error for renaming onto a taken name, in the reference catalog's words."""
    return AlreadyExistsError(
        f"Cannot rename {move.source} to {move.target}. {existing_kind.capitalize()} already exists"
    )


async def require_object(tx: StoreTx, warehouse: str, identifier: Identifier, kind: str) -> ObjectRow:
    """The stored table or view. Raises NoSuchTableError / NoSuchViewError."""
    row = await tx.get_object(warehouse, identifier.namespace.key, identifier.name)
    if row is None or row.kind != kind:
        raise _MISSING[kind](f"{kind.capitalize()} does not exist: {identifier}")
    return row


async def read_for_change(store: Store, warehouse: str, identifier: Identifier) -> ObjectInChain | None:
    """What a change to `identifier` plans and is judged on, in one statement from the database
    (never a cache): the object's pointer and the properties of its namespace and every one above
    it (`catalog.store.commit_reads`); None if its namespace does not exist."""
    levels = identifier.namespace.levels
    chain = [Namespace.of(levels[: depth + 1]).key for depth in range(len(levels))]
    async with store.read() as tx:
        return await commit_reads.object_in_chain(tx, warehouse, chain, identifier.name)


async def read_object(store: Store, warehouse: str, identifier: Identifier, kind: str) -> ObjectRow:
    """`require_object` for reads: the registry's row, or its short-lived cached copy (never for
    a mutation, which compares against the database). Raises NoSuchTableError / NoSuchViewError."""
    namespace, name = identifier.namespace.key, identifier.name
    row = await store.cached(
        RegistryKey.object(warehouse, namespace, name), lambda tx: tx.get_object(warehouse, namespace, name)
    )
    if row is None or row.kind != kind:
        raise _MISSING[kind](f"{kind.capitalize()} does not exist: {identifier}")
    return row


async def load_object(
    ctx: CatalogContext,
    row: ObjectRow,
    variant: str,
    transform: Callable[[bytes], bytes] | None = None,
    config: Callable[[bytes], dict[str, str]] | None = None,
) -> bytes:
    """The LoadTableResult / LoadViewResult of `row`: its metadata (passed through `transform`, which
    makes `variant` of it, when given), unsealed once per metadata version and variant. `config`
    derives the result's `config` from the metadata (so the cached body stays one per version)."""

    async def render() -> bytes:
        metadata_json = await ctx.sealer.open_row(row)
        settings = config(metadata_json) if config is not None else None
        if transform is not None:
            metadata_json = transform(metadata_json)
        return documents.load_result(row.metadata_location, metadata_json, settings)

    return await ctx.load_results.get_or_render((row.uuid, row.metadata_location, variant), render)


async def list_objects(
    ctx: CatalogContext, warehouse_name: str | None, namespace: Namespace, kind: str, page: PageRequest
) -> bytes:
    """A ListTablesResponse document for the tables or views of a namespace."""
    warehouse = ctx.warehouse(warehouse_name)
    store = ctx.store
    await read_namespace(store, warehouse.name, namespace)

    async def fetch(after: str | None, limit: int) -> list[str]:
        key = store.cache.listing_key(("objects", warehouse.name, namespace.key), kind, after, limit)
        return await store.cached(
            key, lambda tx: tx.list_objects(warehouse.name, namespace.key, kind, after, limit)
        )

    result = await fetch_page(page, fetch, ctx.page_key, Scope(warehouse.name, kind, namespace.key))
    return documents.dumps(
        {
            "identifiers": [{"namespace": namespace.levels, "name": name} for name in result.items],
            "next-page-token": result.next_token,
        }
    )


async def _judged_metadata(ctx: CatalogContext, row: ObjectRow) -> TableMetadata | ViewMetadata:
    metadata_json = await ctx.sealer.open_row(row)
    if row.kind == VIEW:
        return ViewMetadata.model_validate_json(metadata_json)
    return TableMetadataUtil.parse_raw(metadata_json.decode())


@dataclass(frozen=True, slots=True)
class Move:
    """A rename: the `kind` of object (TABLE or VIEW) named `source` takes the name `target`."""

    kind: str
    source: Identifier
    target: Identifier


async def rename_object(
    ctx: CatalogContext, warehouse: Warehouse, move: Move, rec: Recorder | None, gate: EffectGate
) -> None:
    """Rename a table or view, across namespaces too, once `gate` has allowed what the move does
    (`effects.of_move`: across namespaces, the object leaves the source with everything it carries
    and arrives at the target with it). The rename is written only if the object is still the
    version that was judged. Raises NoSuch*/AlreadyExists errors, CommitFailedError after
    repeated concurrent changes, and whatever `gate` raises to refuse."""
    kind, source, target = move.kind, move.source, move.target

    async def attempt() -> None:
        async with ctx.store.read() as tx:
            judged = await require_object(tx, warehouse.name, source, kind)
        across = source.namespace != target.namespace
        metadata = await _judged_metadata(ctx, judged) if across else None
        await gate(effects.of_move(source, target, kind, metadata))
        async with ctx.store.write() as tx:
            row = await require_object(tx, warehouse.name, source, kind)
            if row.metadata_location != judged.metadata_location:
                raise PointerMoved  # changed since it was judged: judge the new version
            await require_namespace(tx, warehouse.name, target.namespace)
            taken = await tx.get_object(warehouse.name, target.namespace.key, target.name)
            if taken is not None:
                raise rename_target_taken(move, taken.kind)
            await tx.rename_object(
                warehouse.name, kind, (source.namespace.key, source.name), (target.namespace.key, target.name)
            )
            if rec is not None:
                await rec.record(tx, None)

    await retry_lost_races(
        ctx.limits.commit_retries,
        attempt,
        lambda: "the object changed concurrently too many times; retry the rename",
    )
