"""Rows of `dropped_objects` (see `catalog.store.schema.dropped_objects`): soft-deleted tables
and views, with where their metadata files were parked and how their purge is going.

Every purge attempt is claimed first by compare-and-swap on the attempt count (`claim_purge`), so
two sweepers (workers, instances) never purge one object at once, and an attempt that never
finishes still waits out its backoff.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import bindparam as param
from sqlalchemy import delete, insert, select, update

from cedarberg.catalog.store.objects import OBJECT_FIELDS, ObjectRow
from cedarberg.catalog.store.schema import dropped_objects
from cedarberg.catalog.store.statements import LIMIT, Sql, in_list, in_params, values_of
from cedarberg.catalog.store.tx import StoreTx


@dataclass(frozen=True, slots=True)
class DroppedRow:
    """A soft-deleted object: its last pointer, where its metadata files were moved, and its
    purge attempts so far (`next_purge_attempt_ms` None: at `purge_after_ms`)."""

    drop_id: str
    row: ObjectRow
    moved_files: list[tuple[str, str]]  # (published location, parked location)
    dropped_at_ms: int
    purge_after_ms: int
    purge_attempts: int = 0
    last_purge_error: str | None = None
    next_purge_attempt_ms: int | None = None

    @property
    def next_attempt_ms(self) -> int:
        """When the next purge attempt may start."""
        return self.purge_after_ms if self.next_purge_attempt_ms is None else self.next_purge_attempt_ms


def _dropped(row: Any) -> DroppedRow:
    values = row._asdict()
    return DroppedRow(
        drop_id=values["drop_id"],
        row=ObjectRow(**{name: values[name] for name in OBJECT_FIELDS}),
        moved_files=[(str(a), str(b)) for a, b in orjson.loads(values["moved_files"])],
        dropped_at_ms=values["dropped_at_ms"],
        purge_after_ms=values["purge_after_ms"],
        purge_attempts=values["purge_attempts"],
        last_purge_error=values["last_purge_error"],
        next_purge_attempt_ms=values["next_purge_attempt_ms"],
    )


_drop = dropped_objects.c
_DROPPED_FIELDS = (
    *OBJECT_FIELDS,
    "drop_id",
    "moved_files",
    "dropped_at_ms",
    "purge_after_ms",
    "purge_attempts",
    "last_purge_error",
    "next_purge_attempt_ms",
)
_INSERT_DROPPED = Sql(insert(dropped_objects).values(values_of(dropped_objects, *_DROPPED_FIELDS)))
_GET_DROPPED = Sql(select(dropped_objects).where(_drop.drop_id == param("drop_id")))
_CLAIM_PURGE = Sql(
    update(dropped_objects)
    .where(_drop.drop_id == param("drop_id"), _drop.purge_attempts == param("attempts"))
    .values(purge_attempts=param("next_attempts"), next_purge_attempt_ms=param("next_attempt_ms"))
)
_RECORD_PURGE_FAILURE = Sql(
    update(dropped_objects)
    .where(_drop.drop_id == param("drop_id"), _drop.purge_attempts == param("attempts"))
    .values(last_purge_error=param("error"), next_purge_attempt_ms=param("next_attempt_ms"))
)
_RELEASE_PURGE = Sql(
    update(dropped_objects)
    .where(_drop.drop_id == param("drop_id"), _drop.purge_attempts == 0)
    .values(next_purge_attempt_ms=param("next_attempt_ms"))
)
_DELETE_DROPPED = Sql(delete(dropped_objects).where(_drop.drop_id == param("drop_id")))


@lru_cache(maxsize=4)
def _list_dropped(paged: bool) -> Sql:
    query = select(dropped_objects).where(_drop.warehouse == param("warehouse"))
    if paged:
        query = query.where(_drop.drop_id > param("after"))
    return Sql(query.order_by(_drop.drop_id).limit(LIMIT))


@lru_cache(maxsize=32)
def _due_for_purge(warehouses: int) -> Sql:
    return Sql(
        select(dropped_objects)
        .where(
            _drop.next_purge_attempt_ms <= param("now"),
            _drop.purge_after_ms <= param("now"),  # the retention holds whatever was recorded
            in_list(_drop.warehouse, "w", warehouses),
        )
        .order_by(_drop.next_purge_attempt_ms, _drop.drop_id)
        .limit(LIMIT)
    )


async def insert_dropped(tx: StoreTx, dropped: DroppedRow) -> None:
    """Record a soft-deleted object."""
    await tx.connection.execute(
        _INSERT_DROPPED,
        {
            **asdict(dropped.row),
            "drop_id": dropped.drop_id,
            "moved_files": orjson.dumps(dropped.moved_files).decode(),
            "dropped_at_ms": dropped.dropped_at_ms,
            "purge_after_ms": dropped.purge_after_ms,
            "purge_attempts": dropped.purge_attempts,
            "last_purge_error": dropped.last_purge_error,
            "next_purge_attempt_ms": dropped.next_attempt_ms,
        },
    )


async def get_dropped(tx: StoreTx, drop_id: str) -> DroppedRow | None:
    """The soft-deleted object `drop_id`, or None."""
    row = (await tx.connection.execute(_GET_DROPPED, {"drop_id": drop_id})).first()
    return None if row is None else _dropped(row)


async def list_dropped(tx: StoreTx, warehouse: str, after: str | None, limit: int) -> list[DroppedRow]:
    """Soft-deleted objects of a warehouse in drop-id order (keyset pagination)."""
    rows = await tx.connection.execute(
        _list_dropped(after is not None), {"warehouse": warehouse, "after": after, "limit": limit}
    )
    return [_dropped(row) for row in rows]


async def due_for_purge(
    tx: StoreTx, now_ms: int, warehouses: Collection[str], limit: int
) -> list[DroppedRow]:
    """At most `limit` soft-deleted objects of these warehouses whose next purge attempt is
    due, earliest first (index-backed). An object waiting out a backoff is not among them, so
    objects that keep failing cannot fill the batch; nor are objects of warehouses this
    gateway does not serve."""
    if not warehouses:
        return []
    names = sorted(set(warehouses))
    rows = await tx.connection.execute(
        _due_for_purge(len(names)), {"now": now_ms, "limit": limit, **in_params("w", names)}
    )
    return [_dropped(row) for row in rows]


async def claim_purge(tx: StoreTx, dropped: DroppedRow, next_attempt_ms: int) -> bool:
    """Count a purge attempt of `dropped` as started and move its next attempt to
    `next_attempt_ms`, only if no one else claimed it since it was read (compare-and-swap on
    the attempt count). False: another sweeper (instance or worker) has it, or it is gone.
    Claiming before purging also means an attempt that never finishes still waits its backoff."""
    result = await tx.connection.execute(
        _CLAIM_PURGE,
        {
            "drop_id": dropped.drop_id,
            "attempts": dropped.purge_attempts,
            "next_attempts": dropped.purge_attempts + 1,
            "next_attempt_ms": next_attempt_ms,
        },
    )
    return result.rowcount == 1


async def record_purge_failure(
    tx: StoreTx, drop_id: str, attempts: int, error: str, next_attempt_ms: int
) -> bool:
    """Record why attempt number `attempts` failed and when the next may start; False if the
    row is gone or another attempt has been claimed since."""
    result = await tx.connection.execute(
        _RECORD_PURGE_FAILURE,
        {"drop_id": drop_id, "attempts": attempts, "error": error, "next_attempt_ms": next_attempt_ms},
    )
    return result.rowcount == 1


async def release_purge(tx: StoreTx, drop_id: str, next_attempt_ms: int) -> bool:
    """Let the first purge of `drop_id` start at `next_attempt_ms` (a drop holds it off
    while it moves the object's files); False if an attempt has started or the row is gone."""
    result = await tx.connection.execute(
        _RELEASE_PURGE, {"drop_id": drop_id, "next_attempt_ms": next_attempt_ms}
    )
    return result.rowcount == 1


async def delete_dropped(tx: StoreTx, drop_id: str) -> bool:
    """Forget a soft-deleted object (purged); False if it was gone already."""
    result = await tx.connection.execute(_DELETE_DROPPED, {"drop_id": drop_id})
    return result.rowcount == 1
