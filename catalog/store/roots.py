"""Rows of `object_roots` (see `catalog.store.schema.object_roots`): who holds which root.

Lookups are index-backed: the roots above a candidate are found by equality on each of its
ancestors, the roots below it by one range on the primary key (`root/` < x < `root0`, since '0'
follows '/' byte-wise). Nothing here scans all rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import ARRAY, BigInteger, Boolean, Integer, and_, column, delete, insert, or_, select, text
from sqlalchemy import bindparam as param

from cedarberg.catalog.roots import ancestors, contains
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.schema import catalog_objects, dropped_objects, namespaces, object_roots
from cedarberg.catalog.store.statements import Sql, in_params, values_of
from cedarberg.catalog.store.tx import StoreTx

NAMESPACE = "namespace"
# Changes of roots on PostgreSQL (check, then insert) must not interleave with another's at an
# overlapping place: both would see no conflict. Each takes, until its transaction ends, this lock
# shared (a gateway of before took it exclusive: it still excludes every claim of ours), then a
# lock per place (`place_locks`): its own roots exclusive, every place above them shared. Two
# claims whose places overlap (equal, or one above the other) therefore run one after the other;
# claims in disjoint places (two namespaces, two tables side by side) run at once and can share a
# WAL flush.
PG_ROOTS_LOCK = 0x726F6F7473  # "roots"


@dataclass(frozen=True, slots=True)
class Claim:
    """One recorded root and what holds it."""

    root: str
    kind: str  # table | view | namespace
    owner: str  # object UUID or namespace key
    warehouse: str


def _claim(row: Any) -> Claim:
    return Claim(bytes(row.root).decode(), row.kind, row.owner, row.warehouse)


_roots = object_roots.c
_LOCK = Sql(
    text("SELECT cedarberg_lock_roots(:key, :places, :exclusive) AS locked")
    .bindparams(
        param("key", type_=BigInteger),
        param("places", type_=ARRAY(Integer)),
        param("exclusive", type_=ARRAY(Boolean)),
    )
    .columns(column("locked", Integer))
)
_HELD = Sql(select(_roots.root).where(_roots.kind == param("kind"), _roots.owner == param("owner")))
_ADD = Sql(insert(object_roots).values(values_of(object_roots, "root", "kind", "owner", "warehouse")))
_REMOVE = Sql(delete(object_roots).where(_roots.kind == param("kind"), _roots.owner == param("owner")))
_LIVE_UUID = Sql(select(catalog_objects.c.uuid).where(catalog_objects.c.uuid == param("uuid")))
_DROPPED_UUID = Sql(select(dropped_objects.c.uuid).where(dropped_objects.c.uuid == param("uuid")).limit(1))
_OBJECT_BY_UUID = Sql(
    select(*[catalog_objects.c[name] for name in ObjectRow.__dataclass_fields__]).where(
        catalog_objects.c.uuid == param("uuid")
    )
)


def _namespaces_without_roots() -> Sql:
    owner = namespaces.c.warehouse + "\x1e" + namespaces.c.name
    missing = ~select(_roots.owner).where(_roots.kind == NAMESPACE, _roots.owner == owner).exists()
    return Sql(select(namespaces.c.warehouse, namespaces.c.name, namespaces.c.properties).where(missing))


_NAMESPACES_WITHOUT_ROOTS = _namespaces_without_roots()
_OWNERS_WITHOUT_ROOTS = [
    (
        table.name,
        Sql(select(key).where(~select(_roots.owner).where(_roots.owner == table.c.uuid).exists())),
    )
    for table, key in (
        (catalog_objects, catalog_objects.c.uuid),
        (dropped_objects, dropped_objects.c.drop_id),
    )
]


@lru_cache(maxsize=64)
def _near(ancestor_count: int) -> Sql:
    """Roots equal to one of `ancestor_count` ancestors, or inside the range below the candidate."""
    return Sql(
        select(object_roots).where(
            or_(
                _roots.root.in_([param(f"a{i}", type_=_roots.root.type) for i in range(ancestor_count)]),
                and_(
                    _roots.root > param("above", type_=_roots.root.type),
                    _roots.root < param("below", type_=_roots.root.type),
                ),
            )
        )
    )


def _place_key(place: str) -> int:
    """A place's advisory lock key: 32 bits of its SHA-256 (two places sharing one only wait for
    each other needlessly)."""
    return int.from_bytes(hashlib.sha256(place.encode()).digest()[:4], "big", signed=True)


def place_locks(roots: Iterable[str]) -> tuple[list[int], list[bool]]:
    """The per-place locks a claim of `roots` takes, in the one order every claim takes them (by
    key, so claims never wait for each other in a cycle): (keys, exclusive). Each root is locked
    exclusive, every place above one shared (exclusive wins where a key is both)."""
    wanted: dict[int, bool] = {}
    for root in roots:
        for place in ancestors(root):
            key = _place_key(place)
            wanted[key] = wanted.get(key, False) or place == root
    keys = sorted(wanted)
    return keys, [wanted[key] for key in keys]


async def lock(tx: StoreTx, roots: Iterable[str]) -> None:
    """Hold the locks of a claim of `roots` until `tx` ends (PostgreSQL; see PG_ROOTS_LOCK; SQLite
    writers are serialised already)."""
    if tx.dialect == "postgresql":
        keys, exclusive = place_locks(roots)
        await tx.connection.execute(_LOCK, {"key": PG_ROOTS_LOCK, "places": keys, "exclusive": exclusive})


async def near(tx: StoreTx, root: str) -> list[Claim]:
    """Every recorded root that is `root`, above it or below it (any warehouse)."""
    base = root.rstrip("/")
    found = [item.encode() for item in ancestors(root)]
    rows = await tx.connection.execute(
        _near(len(found)),
        {"above": (base + "/").encode(), "below": (base + "0").encode(), **in_params("a", found)},
    )
    return [_claim(row) for row in rows]


async def held(tx: StoreTx, kind: str, owner: str) -> list[str]:
    """The roots recorded for one object (kind table or view: past ones too) or namespace."""
    rows = await tx.connection.execute(_HELD, {"kind": kind, "owner": owner})
    return sorted(bytes(row.root).decode() for row in rows)


async def add(tx: StoreTx, warehouse: str, kind: str, owner: str, roots: Iterable[str]) -> None:
    """Record roots for an object or namespace (ones it holds already are left as they are)."""
    have = set(await held(tx, kind, owner))
    await add_new(tx, warehouse, kind, owner, sorted(set(roots) - have))


async def add_new(tx: StoreTx, warehouse: str, kind: str, owner: str, roots: Sequence[str]) -> None:
    """Record roots the object or namespace does not hold (its caller has just read or removed
    what it holds, in `tx`); one it holds already is an IntegrityViolation."""
    if roots:
        await tx.connection.execute_many(
            _ADD,
            [{"root": root.encode(), "kind": kind, "owner": owner, "warehouse": warehouse} for root in roots],
        )


async def claim_namespace_directory(tx: StoreTx, warehouse: str, owner: str, directory: str) -> bool:
    """Record the directory of the namespace `owner`, which holds none in `tx`, unless it is or lies
    inside a table's or view's roots: then False, and nothing is recorded."""
    await lock(tx, [directory])
    for found in await near(tx, directory):
        if found.kind != NAMESPACE and contains(found.root, directory):
            return False
    await add_new(tx, warehouse, NAMESPACE, owner, [directory])
    return True


async def remove(tx: StoreTx, kind: str, owner: str) -> None:
    """Forget every root of an object (purged or hard-dropped) or namespace (dropped)."""
    await tx.connection.execute(_REMOVE, {"kind": kind, "owner": owner})


async def uuid_in_use(tx: StoreTx, uuid: str) -> bool:
    """True if a live or soft-deleted table or view has this UUID."""
    if (await tx.connection.execute(_LIVE_UUID, {"uuid": uuid})).first() is not None:
        return True
    return (await tx.connection.execute(_DROPPED_UUID, {"uuid": uuid})).first() is not None


def namespace_owner(warehouse: str, key: str) -> str:
    """The owner of a namespace directory's row (namespace keys repeat across warehouses)."""
    return f"{warehouse}\x1e{key}"


async def namespaces_without_roots(tx: StoreTx) -> list[tuple[str, str, dict[str, str]]]:
    """(warehouse, key, properties) of namespaces whose directory is not recorded yet."""
    rows = await tx.connection.execute(_NAMESPACES_WITHOUT_ROOTS)
    return [(row.warehouse, row.name, dict(orjson.loads(row.properties))) for row in rows]


async def owners_without_roots(tx: StoreTx) -> list[tuple[str, str]]:
    """(table, key) of objects without recorded roots: ("catalog_objects", uuid) or
    ("dropped_objects", drop id), for the backfill of rows that predate `object_roots`."""
    found: list[tuple[str, str]] = []
    for table_name, query in _OWNERS_WITHOUT_ROOTS:
        rows = await tx.connection.execute(query)
        found += [(table_name, str(row[0])) for row in rows]
    return found


async def object_by_uuid(tx: StoreTx, uuid: str) -> ObjectRow | None:
    """The live table or view with this UUID."""
    row = (await tx.connection.execute(_OBJECT_BY_UUID, {"uuid": uuid})).first()
    return None if row is None else ObjectRow(*row)
