"""Exclusive locations against the registry: claim roots, verify them at use time, backfill.

`catalog.roots` says what an object's roots are and where they may lie; this module keeps the
`object_roots` index and enforces, inside the same database transaction as the pointer change,
that no two objects' roots overlap and that no root is or contains a namespace directory. A
refused change rolls back whole: nothing is written to the registry.

Roots are keyed by the object's UUID, so they follow a rename, and kept for the object's whole
life (past ones too, after a `set-location`) and while it is soft-deleted; they go when it is
purged or hard-dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson

from cedarberg.catalog import roots
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import CatalogError, ForbiddenError, LocationNotAllowedError
from cedarberg.catalog.identifiers import Namespace
from cedarberg.catalog.store import dropped as dropped_rows
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import roots as rows
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.tx import StoreTx

log = logging.getLogger(__name__)
TABLE = "table"  # the kinds of catalog.objects (not imported: catalog.objects imports this module)


def warehouse_roots(ctx: CatalogContext) -> list[str]:
    """The root of every configured warehouse."""
    return [warehouse.location for warehouse in ctx.warehouses.values()]


def _conflict(root: str, kind: str, owner: str, claim: rows.Claim) -> str | None:
    """Why `claim` stands in the way of `owner` holding `root`, or None when it does not."""
    if claim.kind == rows.NAMESPACE:
        if roots.contains(root, claim.root):
            return f"location {root!r} is or contains the directory of a namespace"
        return None  # a namespace directory above the root is where objects belong
    if claim.kind == kind and claim.owner == owner:
        return None
    return f"location {root!r} overlaps the location of another table or view (live or dropped)"


@dataclass(frozen=True, slots=True)
class Holder:
    """The object roots are claimed for: its namespace (where its roots must lie), kind and UUID."""

    namespace: Namespace
    kind: str
    owner: str  # the object's UUID: roots follow it through renames


async def claim(
    tx: StoreTx, ctx: CatalogContext, warehouse: Warehouse, holder: Holder, candidate: Sequence[str]
) -> None:
    """Record `candidate` (normalised roots) for the object `holder`, inside `tx`.

    Roots it holds already are not checked again. Raises LocationNotAllowedError naming the rule
    a new root breaks (placement in the namespace directory, a warehouse root, a namespace
    directory, or overlap with any other live or soft-deleted object)."""
    namespace, kind, owner = holder.namespace, holder.kind, holder.owner
    fresh = sorted(set(candidate) - set(await rows.held(tx, kind, owner)))
    if not fresh:
        return
    await rows.lock(tx, fresh)
    properties = await namespace_rows.get_namespace(tx, warehouse.name, namespace.key) or {}
    check_new_roots(ctx, warehouse, namespace, properties, fresh)
    await _check_no_overlap(tx, kind, owner, fresh)
    await rows.add_new(tx, warehouse.name, kind, owner, fresh)


def check_new_roots(
    ctx: CatalogContext,
    warehouse: Warehouse,
    namespace: Namespace,
    ns_properties: dict[str, str],
    fresh: Sequence[str],
) -> None:
    """The placement rule for roots an object is about to gain (before anything is written; the
    overlap is checked by `claim`). Raises LocationNotAllowedError."""
    roots.check_placement(
        fresh,
        roots.namespace_directory(warehouse.location, namespace, ns_properties),
        warehouse.location,
        warehouse_roots(ctx),
        warehouse.allow_locations_outside_namespace,
    )


async def check_free(
    ctx: CatalogContext, warehouse: Warehouse, namespace: Namespace, kind: str, candidate: Sequence[str]
) -> None:
    """`claim` without recording (stage-create): raises LocationNotAllowedError."""
    async with ctx.store.read() as tx:
        properties = await namespace_rows.get_namespace(tx, warehouse.name, namespace.key) or {}
        check_new_roots(ctx, warehouse, namespace, properties, candidate)
        await _check_no_overlap(tx, kind, "", candidate)


async def check_clear(ctx: CatalogContext, kind: str, owner: str, candidate: Sequence[str]) -> None:
    """Before a file is written under `candidate` (normalised roots the object `owner` is about to
    gain): raise LocationNotAllowedError if one overlaps another object's roots or is or contains a
    namespace directory, so nothing is written in another object's place. `claim` checks again
    when it records them."""
    async with ctx.store.read() as tx:
        await _check_no_overlap(tx, kind, owner, candidate)


async def _check_no_overlap(tx: StoreTx, kind: str, owner: str, candidate: Sequence[str]) -> None:
    """Raise LocationNotAllowedError if a root of `candidate` overlaps another object's roots or
    is (or contains) a namespace directory; `owner`'s own roots do not count."""
    for root in candidate:
        for found in await rows.near(tx, root):
            reason = _conflict(root, kind, owner, found)
            if reason is not None:
                raise LocationNotAllowedError(reason)


async def held(ctx: CatalogContext, kind: str, owner: str, current: Iterable[str]) -> tuple[str, ...]:
    """Every root of an object, recorded (past ones included) or `current`: where its files are."""
    async with ctx.store.read() as tx:
        recorded = await rows.held(tx, kind, owner)
    return tuple(sorted(set(recorded) | set(current)))


async def verify(ctx: CatalogContext, kind: str, owner: str, current: Sequence[str]) -> None:
    """At use time (vending, signing): raise ForbiddenError unless every current root is recorded
    for this object (or the object is a staged table, registered nowhere yet), keeps clear of every
    warehouse root and namespace directory, and overlaps no other object's roots. Catches objects
    whose locations predate the rule."""
    async with ctx.store.read() as tx:
        recorded = set(await rows.held(tx, kind, owner))
        # A staged table (stage-create, not committed yet) has no row and no roots: its place was
        # checked free when it was staged and is checked again below; it is claimed at its commit.
        staged = not recorded and not await rows.uuid_in_use(tx, owner)
        for root in current:
            if root not in recorded and not staged:
                raise ForbiddenError(f"location {root!r} of this {kind} is not confined (not recorded)")
            if any(roots.contains(root, warehouse) for warehouse in warehouse_roots(ctx)):
                raise ForbiddenError(f"location {root!r} of this {kind} is or contains a warehouse root")
            for found in await rows.near(tx, root):
                reason = _conflict(root, kind, owner, found)
                if reason is not None:
                    raise ForbiddenError(f"this {kind}'s files are not confined: {reason}")


def roots_of_document(kind: str, metadata_json: bytes) -> tuple[str, ...]:
    """The roots named by a table's or view's metadata document."""
    document = orjson.loads(metadata_json)
    properties = (document.get("properties") or {}) if kind == TABLE else {}
    return roots.object_roots(str(document["location"]), properties)


async def record_namespace(
    tx: StoreTx, warehouse: Warehouse, namespace: Namespace, properties: dict[str, str], *, new: bool = False
) -> None:
    """Record (or move) a namespace's directory, inside `tx`. Raises LocationNotAllowedError if
    the directory is or lies inside a table's or view's roots.

    `new`: the namespace was inserted in `tx`, so it holds no directory yet (a dropped namespace's
    directory goes with it) and there is nothing to look up or move: two statements fewer."""
    directory = roots.namespace_directory(warehouse.location, namespace, properties)
    owner = rows.namespace_owner(warehouse.name, namespace.key)
    if not new:
        if await rows.held(tx, rows.NAMESPACE, owner) == [directory]:
            return
        await rows.remove(tx, rows.NAMESPACE, owner)
    if not await rows.claim_namespace_directory(tx, warehouse.name, owner, directory):
        raise LocationNotAllowedError(
            f"namespace directory {directory!r} lies inside the location of a table or view"
        )


async def forget_namespace(tx: StoreTx, warehouse: Warehouse, namespace: Namespace) -> None:
    """Forget a dropped namespace's directory, inside `tx`."""
    await rows.remove(tx, rows.NAMESPACE, rows.namespace_owner(warehouse.name, namespace.key))


async def forget(tx: StoreTx, kind: str, owner: str) -> None:
    """Forget every root of a purged or hard-dropped object, inside `tx`."""
    await rows.remove(tx, kind, owner)


async def backfill(ctx: CatalogContext) -> int:
    """Record the roots of namespaces and objects that predate `object_roots`; returns how many
    objects were recorded. Never raises for one object: one that cannot be opened now (KMS down)
    is logged and left for the next start (its files are refused to engines meanwhile); one whose
    roots break the rule is recorded anyway (so nothing new may overlap it) and logged."""
    async with ctx.store.read() as tx:
        spaces = await rows.namespaces_without_roots(tx)
        missing = await rows.owners_without_roots(tx)
    for warehouse_name, key, properties in spaces:
        warehouse = ctx.warehouses.get(warehouse_name)
        if warehouse is None:
            continue
        try:
            directory = roots.namespace_directory(warehouse.location, Namespace.parse(key), properties)
            async with ctx.store.write() as tx:
                owner = rows.namespace_owner(warehouse.name, key)
                await rows.add(tx, warehouse.name, rows.NAMESPACE, owner, [directory])
        except CatalogError as err:
            log.warning("directory of namespace %r not recorded yet: %s", key, err)
    recorded = 0
    for table, key in missing:
        try:
            row = await _row(ctx, table, key)
            if row is None or row.warehouse not in ctx.warehouses:
                continue
            found = roots_of_document(row.kind, await ctx.sealer.open_row(row))
            async with ctx.store.write() as tx:
                await _report_violations(tx, ctx, row, found)
                await rows.add(tx, row.warehouse, row.kind, row.uuid, found)
        except CatalogError as err:
            log.warning("roots of %s %s not recorded yet: %s", table, key, err)
            continue
        recorded += 1
    if recorded:
        log.info("recorded the roots of %d existing table(s) and view(s)", recorded)
    return recorded


async def _row(ctx: CatalogContext, table: str, key: str) -> ObjectRow | None:
    async with ctx.store.read() as tx:
        if table == "catalog_objects":
            return await rows.object_by_uuid(tx, key)
        dropped = await dropped_rows.get_dropped(tx, key)
        return None if dropped is None else dropped.row


async def _report_violations(tx: StoreTx, ctx: CatalogContext, row: ObjectRow, found: Sequence[str]) -> None:
    """Log (never raise) how an existing object's roots break the rule."""
    for root in found:
        problems = [
            reason
            for claim_row in await rows.near(tx, root)
            if (reason := _conflict(root, row.kind, row.uuid, claim_row)) is not None
        ]
        if any(roots.contains(root, warehouse) for warehouse in warehouse_roots(ctx)):
            problems.append(f"location {root!r} is or contains a warehouse root")
        for problem in problems:
            log.warning(
                "existing %s %s breaks the location rule (its files will not be vended or signed): %s",
                row.kind,
                row.uuid,
                problem,
            )
