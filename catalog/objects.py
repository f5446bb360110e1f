"""What tables and views share: loading, listing and renaming (their lookups: catalog.lookups)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog import documents, effects
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.effects import EffectGate
from cedarberg.catalog.errors import AlreadyExistsError
from cedarberg.catalog.idempotency import Recorder
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import VIEW, read_namespace, require_namespace, require_object
from cedarberg.catalog.lost_races import PointerMoved, retry_lost_races
from cedarberg.catalog.pagination import PageRequest, Scope, fetch_page
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.objects import ObjectRow


def rename_target_taken(move: Move, existing_kind: str) -> AlreadyExistsError:
    """The error for renaming onto a taken name, in the reference catalog's words."""
    return AlreadyExistsError(
        f"Cannot rename {move.source} to {move.target}. {existing_kind.capitalize()} already exists"
    )


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
            key, lambda tx: object_rows.list_objects(tx, warehouse.name, namespace.key, kind, after, limit)
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
            taken = await object_rows.get_object(tx, warehouse.name, target.namespace.key, target.name)
            if taken is not None:
                raise rename_target_taken(move, taken.kind)
            await object_rows.rename_object(
                tx,
                warehouse.name,
                kind,
                (source.namespace.key, source.name),
                (target.namespace.key, target.name),
            )
            if rec is not None:
                await rec.record(tx, None)

    await retry_lost_races(
        ctx.limits.commit_retries,
        attempt,
        lambda: "the object changed concurrently too many times; retry the rename",
    )
