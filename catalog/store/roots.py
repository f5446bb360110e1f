"""Rows of `object_roots` (see `catalog.store.schema.object_roots`): who holds which root.

Lookups are index-backed: the roots above a candidate are found by equality on each of its
ancestors, the roots below it by one range on the primary key (`root/` < x < `root0`, since '0'
follows '/' byte-wise). Nothing here scans all rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from sqlalchemy import and_, delete, insert, or_, select, text

from cedarberg.catalog.roots import ancestors
from cedarberg.catalog.store.schema import catalog_objects, dropped_objects, namespaces, object_roots
from cedarberg.catalog.store.sql import ObjectRow, StoreTx

NAMESPACE = "namespace"
# Serialises changes of roots across PostgreSQL transactions (check, then insert, must not
# interleave with another's: two creates at overlapping places would both see no conflict).
_PG_ROOTS_LOCK = 0x726F6F7473  # "roots"


@dataclass(frozen=True, slots=True)
class Claim:
    """One recorded root and what holds it."""

    root: str
    kind: str  # table | view | namespace
    owner: str  # object UUID or namespace key
    warehouse: str


def _claim(row: object) -> Claim:
    values = row._asdict()  # type: ignore[attr-defined]
    return Claim(bytes(values["root"]).decode(), values["kind"], values["owner"], values["warehouse"])


async def lock(tx: StoreTx) -> None:
    """Hold the roots lock until `tx` ends (PostgreSQL; SQLite writers are serialised already)."""
    if tx.connection.dialect.name == "postgresql":
        await tx.connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_ROOTS_LOCK})


async def near(tx: StoreTx, root: str) -> list[Claim]:
    """Every recorded root that is `root`, above it or below it (any warehouse)."""
    base = root.rstrip("/")
    query = select(object_roots).where(
        or_(
            object_roots.c.root.in_([item.encode() for item in ancestors(root)]),
            and_(object_roots.c.root > (base + "/").encode(), object_roots.c.root < (base + "0").encode()),
        )
    )
    return [_claim(row) for row in await tx.connection.execute(query)]


async def held(tx: StoreTx, kind: str, owner: str) -> list[str]:
    """The roots recorded for one object (kind table or view: past ones too) or namespace."""
    rows = await tx.connection.execute(
        select(object_roots.c.root).where(object_roots.c.kind == kind, object_roots.c.owner == owner)
    )
    return sorted(bytes(row.root).decode() for row in rows)


async def add(tx: StoreTx, warehouse: str, kind: str, owner: str, roots: Iterable[str]) -> None:
    """Record roots for an object or namespace (ones it holds already are left as they are)."""
    have = set(await held(tx, kind, owner))
    fresh = sorted(set(roots) - have)
    if fresh:
        await tx.connection.execute(
            insert(object_roots),
            [{"root": root.encode(), "kind": kind, "owner": owner, "warehouse": warehouse} for root in fresh],
        )


async def remove(tx: StoreTx, kind: str, owner: str) -> None:
    """Forget every root of an object (purged or hard-dropped) or namespace (dropped)."""
    await tx.connection.execute(
        delete(object_roots).where(object_roots.c.kind == kind, object_roots.c.owner == owner)
    )


async def uuid_in_use(tx: StoreTx, uuid: str) -> bool:
    """True if a live or soft-deleted table or view has this UUID."""
    live = await tx.connection.execute(select(catalog_objects.c.uuid).where(catalog_objects.c.uuid == uuid))
    if live.first() is not None:
        return True
    dropped = await tx.connection.execute(
        select(dropped_objects.c.uuid).where(dropped_objects.c.uuid == uuid).limit(1)
    )
    return dropped.first() is not None


def namespace_owner(warehouse: str, key: str) -> str:
    """The owner of a namespace directory's row (namespace keys repeat across warehouses)."""
    return f"{warehouse}\x1e{key}"


async def namespaces_without_roots(tx: StoreTx) -> list[tuple[str, str, dict[str, str]]]:
    """(warehouse, key, properties) of namespaces whose directory is not recorded yet."""
    owner = namespaces.c.warehouse + "\x1e" + namespaces.c.name
    missing = (
        ~select(object_roots.c.owner)
        .where(object_roots.c.kind == NAMESPACE, object_roots.c.owner == owner)
        .exists()
    )
    rows = await tx.connection.execute(
        select(namespaces.c.warehouse, namespaces.c.name, namespaces.c.properties).where(missing)
    )
    return [(row.warehouse, row.name, dict(orjson.loads(row.properties))) for row in rows]


async def owners_without_roots(tx: StoreTx) -> list[tuple[str, str]]:
    """(table, key) of objects without recorded roots: ("catalog_objects", uuid) or
    ("dropped_objects", drop id), for the backfill of rows that predate `object_roots`."""
    found: list[tuple[str, str]] = []
    for table, key in (
        (catalog_objects, catalog_objects.c.uuid),
        (dropped_objects, dropped_objects.c.drop_id),
    ):
        missing = ~select(object_roots.c.owner).where(object_roots.c.owner == table.c.uuid).exists()
        rows = await tx.connection.execute(select(key).where(missing))
        found += [(table.name, str(row[0])) for row in rows]
    return found


async def object_by_uuid(tx: StoreTx, uuid: str) -> ObjectRow | None:
    """The live table or view with this UUID."""
    columns = [catalog_objects.c[name] for name in ObjectRow.__dataclass_fields__]
    row = (await tx.connection.execute(select(*columns).where(catalog_objects.c.uuid == uuid))).first()
    return None if row is None else ObjectRow(**row._asdict())
