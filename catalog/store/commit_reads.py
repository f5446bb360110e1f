"""What a commit to one table plans and is judged on, read in one statement: its pointer, and the
properties of its namespace and of every namespace above it (the grants authorization decides the
commit's effect on). One round trip on PostgreSQL instead of two: the plan's read and the gate's
read of the grants, both from the database in the request as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import orjson
from sqlalchemy import and_, select
from sqlalchemy import bindparam as param

from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.schema import catalog_objects, namespaces
from cedarberg.catalog.store.statements import Sql, in_params
from cedarberg.catalog.store.tx import StoreTx

_ns = namespaces.c
_obj = catalog_objects.c
_OBJECT_COLUMNS = [_obj[name] for name in ObjectRow.__dataclass_fields__]


@dataclass(frozen=True, slots=True)
class ObjectInChain:
    """A table's or view's pointer (None: no object has the name) and the properties of the
    namespaces from the top level down to its own (None where no such namespace exists)."""

    row: ObjectRow | None
    chain: tuple[dict[str, str] | None, ...]

    @property
    def ns_properties(self) -> dict[str, str]:
        """The properties of the object's own namespace (the last of the chain)."""
        own = self.chain[-1]
        assert own is not None  # `object_in_chain` answers None when it does not exist
        return own


@lru_cache(maxsize=16)
def _object_in_chain(levels: int) -> Sql:
    """One shape per namespace depth: every namespace of the chain, the last joined to the
    object at the name."""
    names = [param(f"n{i}", type_=_ns.name.type) for i in range(levels)]
    own = names[-1]
    return Sql(
        select(_ns.name.label("ns_name"), _ns.properties.label("ns_properties"), *_OBJECT_COLUMNS)
        .select_from(
            namespaces.outerjoin(
                catalog_objects,
                and_(
                    _ns.name == own,
                    _obj.warehouse == _ns.warehouse,
                    _obj.namespace == _ns.name,
                    _obj.name == param("name"),
                ),
            )
        )
        .where(_ns.warehouse == param("warehouse"), _ns.name.in_(names))
    )


async def object_in_chain(
    tx: StoreTx, warehouse: str, chain: Sequence[str], name: str
) -> ObjectInChain | None:
    """The object `name` in the namespace `chain[-1]` and the properties of every namespace of
    `chain` (namespace keys from the top level down), in one statement; None if the object's own
    namespace does not exist."""
    rows = await tx.connection.execute(
        _object_in_chain(len(chain)), {"warehouse": warehouse, "name": name, **in_params("n", chain)}
    )
    found: dict[str, dict[str, str]] = {}
    row: ObjectRow | None = None
    for item in rows:
        found[item.ns_name] = dict(orjson.loads(item.ns_properties))
        if item.ns_name == chain[-1] and item.uuid is not None:
            row = ObjectRow(*item[2:])
    if chain[-1] not in found:
        return None
    return ObjectInChain(row, tuple(found.get(key) for key in chain))
