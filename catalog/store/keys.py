"""Wrapped data keys wherever the registry holds one: `registry_keys` (the registry's own keys)
and the key columns of `catalog_objects` and `dropped_objects` (see `catalog.store.schema`),
read and replaced here for KEK rotation.

A key is replaced only if it is still the one read (compare-and-swap on the wrapped bytes), so
a rotation racing a commit or another rotation never loses a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, func, insert, select, update
from sqlalchemy import bindparam as param
from sqlalchemy.sql.expression import ColumnElement

from cedarberg.catalog.store.driver import IntegrityViolation
from cedarberg.catalog.store.schema import catalog_objects, dropped_objects, registry_keys
from cedarberg.catalog.store.statements import LIMIT, Sql, values_of
from cedarberg.catalog.store.tx import StoreTx, now_ms
from cedarberg.kms.keys import WrappedKey


@dataclass(frozen=True, slots=True)
class KeyRef:
    """A wrapped data key and the row that holds it (for KEK rotation)."""

    table: str  # catalog_objects | dropped_objects | registry_keys
    row_id: str  # object UUID, drop id or registry key name
    warehouse: str
    kind: str
    uuid: str
    wrapped: WrappedKey


_GET_REGISTRY_KEY = Sql(select(registry_keys).where(registry_keys.c.name == param("name")))
_INSERT_REGISTRY_KEY = Sql(
    insert(registry_keys).values(
        values_of(registry_keys, "name", "uuid", "kek_uri", "kek_version", "wrapped_key", "created_at_ms")
    )
)


def _key_statements(table: Table, id_column: ColumnElement[Any]) -> tuple[Sql, Sql, Sql]:
    """(keys not under a KEK version, their count, replace one) for one key-holding table."""
    c = table.c
    other_kek = (c.kek_uri != param("kek_uri")) | (c.kek_version != param("kek_version"))
    columns = [id_column.label("row_id"), c.uuid, c.kek_uri, c.kek_version, c.wrapped_key]
    if table is not registry_keys:
        columns += [c.warehouse, c.kind]
    return (
        Sql(select(*columns).where(other_kek).limit(LIMIT)),
        Sql(select(func.count()).select_from(table).where(other_kek)),
        Sql(
            update(table)
            .where(id_column == param("row_id"), c.wrapped_key == param("old_key", type_=c.wrapped_key.type))
            .values(
                kek_uri=param("new_kek_uri"),
                kek_version=param("new_kek_version"),
                wrapped_key=param("new_key", type_=c.wrapped_key.type),
            )
        ),
    )


_KEY_STATEMENTS = {
    table.name: _key_statements(table, id_column)
    for table, id_column in (
        (catalog_objects, catalog_objects.c.uuid),
        (dropped_objects, dropped_objects.c.drop_id),
        (registry_keys, registry_keys.c.name),
    )
}


async def get_registry_key(tx: StoreTx, name: str) -> tuple[str, WrappedKey] | None:
    """(uuid, wrapped key) of a registry data key."""
    row = (await tx.connection.execute(_GET_REGISTRY_KEY, {"name": name})).first()
    if row is None:
        return None
    return row.uuid, WrappedKey(row.kek_uri, row.kek_version, row.wrapped_key)


async def insert_registry_key(tx: StoreTx, name: str, key_uuid: str, wrapped: WrappedKey) -> bool:
    """Store a new registry key; False if another instance stored one first."""
    try:
        await tx.connection.execute(
            _INSERT_REGISTRY_KEY,
            {
                "name": name,
                "uuid": key_uuid,
                "kek_uri": wrapped.kek_uri,
                "kek_version": wrapped.kek_version,
                "wrapped_key": wrapped.ciphertext,
                "created_at_ms": now_ms(),
            },
        )
    except IntegrityViolation:
        return False
    return True


async def keys_not_under(tx: StoreTx, kek_uri: str, kek_version: str, limit: int) -> list[KeyRef]:
    """Up to `limit` wrapped keys, over all key-holding tables, not wrapped by this KEK version."""
    refs: list[KeyRef] = []
    for table_name, (select_keys, _count, _replace) in _KEY_STATEMENTS.items():
        if len(refs) >= limit:
            break
        is_registry = table_name == "registry_keys"
        rows = await tx.connection.execute(
            select_keys, {"kek_uri": kek_uri, "kek_version": kek_version, "limit": limit - len(refs)}
        )
        for row in rows:
            refs.append(
                KeyRef(
                    table=table_name,
                    row_id=row.row_id,
                    warehouse="" if is_registry else row.warehouse,
                    kind="registry" if is_registry else row.kind,
                    uuid=row.uuid,
                    wrapped=WrappedKey(row.kek_uri, row.kek_version, row.wrapped_key),
                )
            )
    return refs


async def count_keys_not_under(tx: StoreTx, kek_uri: str, kek_version: str) -> int:
    """How many wrapped keys, over all key-holding tables, are not wrapped by this KEK version."""
    total = 0
    for _select, count, _replace in _KEY_STATEMENTS.values():
        result = await tx.connection.execute(count, {"kek_uri": kek_uri, "kek_version": kek_version})
        total += int(result.scalar_one())
    return total


async def replace_key(tx: StoreTx, ref: KeyRef, new: WrappedKey) -> bool:
    """Swap a wrapped key for its rewrapped form, only if it is still the one read."""
    tx.touched.everything = True
    replace = _KEY_STATEMENTS[ref.table][2]
    result = await tx.connection.execute(
        replace,
        {
            "row_id": ref.row_id,
            "old_key": ref.wrapped.ciphertext,
            "new_kek_uri": new.kek_uri,
            "new_kek_version": new.kek_version,
            "new_key": new.ciphertext,
        },
    )
    return result.rowcount == 1
