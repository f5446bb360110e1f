"""Ids of the schemas, partition specs and sort orders a commit adds, assigned as Iceberg's
reference assigns them (`TableMetadata.Builder`), not as the client sent them.

A client numbers what it adds from the metadata it last read. When a concurrent commit added one
with the same id first (two replace transactions), the reference reuses an equal one or takes the
next free id; pyiceberg would refuse the commit (sort orders, specs) or keep two schemas under
one id. `assign` rewrites the updates before pyiceberg applies them: an `add-*` equal to an
existing item is dropped and refers to that item, a new one takes the next free id, and
`set-current-schema`, `set-default-spec` and `set-default-sort-order` follow, both for -1 ("the
last added") and for an id as the client sent it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    TableUpdate,
)

LAST_ADDED = -1
UNSORTED_ORDER_ID = 0


@dataclass
class _Numbering:
    """One kind of numbered item: the id of each distinct item present, and this commit's ids."""

    ids: dict[Hashable, int]  # what makes two items equal -> the id of the first such item
    next_id: int
    sent: dict[int, int] = field(default_factory=dict)  # id as sent -> id assigned
    last_added: int | None = None

    @classmethod
    def of(cls, items: Iterable[tuple[Hashable, int]], first_id: int) -> _Numbering:
        ids: dict[Hashable, int] = {}
        for identity, item_id in items:
            ids.setdefault(identity, item_id)
        return cls(ids, max([*ids.values(), first_id - 1]) + 1)

    def place(self, sent_id: int, identity: Hashable, fixed_id: int | None = None) -> tuple[int, bool]:
        """The id of an added item (`fixed_id` if it has one by definition), and whether it is new."""
        assigned = self.ids.get(identity)
        is_new = assigned is None
        if assigned is None:
            assigned = fixed_id if fixed_id is not None else self.next_id
            self.ids[identity] = assigned
            self.next_id = max(self.next_id, assigned + 1)
        self.sent[sent_id] = assigned
        self.last_added = assigned
        return assigned, is_new

    def resolve(self, requested: int) -> int:
        if requested == LAST_ADDED:
            return self.last_added if self.last_added is not None else requested
        return self.sent.get(requested, requested)


def schema_identity(schema: Schema) -> Hashable:
    """What makes two schemas the same schema, ids aside (tables and views alike)."""
    return (tuple(schema.fields), tuple(schema.identifier_field_ids))


def _spec_identity(spec: PartitionSpec) -> Hashable:
    # As the reference's `compatibleWith`: partition field ids do not make specs differ.
    return tuple((f.source_id, str(f.transform), f.name) for f in spec.fields)


def _order_identity(order: SortOrder) -> Hashable:
    return tuple(order.fields)


_NUMBERED = (
    AddSchemaUpdate,
    AddPartitionSpecUpdate,
    AddSortOrderUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSpecUpdate,
    SetDefaultSortOrderUpdate,
)


def assign(base: TableMetadata, updates: Sequence[TableUpdate]) -> tuple[TableUpdate, ...]:
    """`updates` with the ids of added schemas, specs and sort orders assigned (see the module)."""
    if not any(isinstance(update, _NUMBERED) for update in updates):
        # Most commits (appends, properties) number nothing: the identities of every schema,
        # spec and sort order are not worth computing for them.
        return tuple(updates)
    schemas = _Numbering.of(((schema_identity(s), s.schema_id) for s in base.schemas), 0)
    specs = _Numbering.of(((_spec_identity(s), s.spec_id) for s in base.partition_specs), 0)
    orders = _Numbering.of(
        ((_order_identity(o), o.order_id) for o in base.sort_orders), UNSORTED_ORDER_ID + 1
    )
    out: list[TableUpdate] = []
    for update in updates:
        if isinstance(update, AddSchemaUpdate):
            schema_id, is_new = schemas.place(update.schema_.schema_id, schema_identity(update.schema_))
            if is_new:
                schema = update.schema_.model_copy(update={"schema_id": schema_id})
                out.append(update.model_copy(update={"schema_": schema}))
        elif isinstance(update, AddPartitionSpecUpdate):
            spec_id, is_new = specs.place(update.spec.spec_id, _spec_identity(update.spec))
            if is_new:
                out.append(
                    update.model_copy(update={"spec": update.spec.model_copy(update={"spec_id": spec_id})})
                )
        elif isinstance(update, AddSortOrderUpdate):
            order = update.sort_order
            unsorted = UNSORTED_ORDER_ID if not order.fields else None
            order_id, is_new = orders.place(order.order_id, _order_identity(order), unsorted)
            if is_new:
                out.append(
                    update.model_copy(update={"sort_order": order.model_copy(update={"order_id": order_id})})
                )
        elif isinstance(update, SetCurrentSchemaUpdate):
            out.append(update.model_copy(update={"schema_id": schemas.resolve(update.schema_id)}))
        elif isinstance(update, SetDefaultSpecUpdate):
            out.append(update.model_copy(update={"spec_id": specs.resolve(update.spec_id)}))
        elif isinstance(update, SetDefaultSortOrderUpdate):
            out.append(update.model_copy(update={"sort_order_id": orders.resolve(update.sort_order_id)}))
        else:
            out.append(update)
    return tuple(out)
