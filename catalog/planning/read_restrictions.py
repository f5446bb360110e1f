"""A caller's scan grants as the Iceberg REST spec's `ReadRestrictions` (the `read-restrictions`
of a LoadTableResult, apache/iceberg PR #13879): `required-column-projections` (one action per
field id) and a `required-row-filter` (an expression over field ids).

The spec has one object per response; grants are several ways to read (one per restricted permit,
`catalog.planning.grants`). The object says what *every* grant allows, with the rows of *any*:

- a field is shown as is only when every grant lets it through unmasked; masked when the grants
  that do not show it as is all mask it the same way; hidden (`replace-with-null`, or
  `mask-to-fixed-value` for a required field) otherwise: a column one grant hides, or two grants
  mask differently;
- the row filter is the OR of the grants' filters (none when one grant has none).

Every column the object shows is one every grant shows, so every row it lets through is a row
some grant allows for those columns: exactly what planning grants a scan of them
(`grants.effective_row_filter` ORs the filters of the covering grants). Wider reads that only a
union of grants allows cannot be written as one object and are not granted (fail closed).

Fields are walked in every schema the table has had (a reader may time-travel to an older one); a
struct that grants treat differently inside is walked into, and any other nested field (a list,
a map) is shown as is or hidden whole, so no projection targets a map key or a field inside
another projection, as the spec requires. A restriction this table cannot honour (a mask naming
a column it lacks, or one whose type the action does not apply to, a row filter that does not
bind) refuses the load: `ForbiddenError`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundEqualTo,
    BoundGreaterThan,
    BoundGreaterThanOrEqual,
    BoundIn,
    BoundIsNaN,
    BoundIsNull,
    BoundLessThan,
    BoundLessThanOrEqual,
    BoundLiteralPredicate,
    BoundNotEqualTo,
    BoundNotIn,
    BoundNotNaN,
    BoundNotNull,
    BoundNotStartsWith,
    BoundSetPredicate,
    BoundStartsWith,
    BoundUnaryPredicate,
    Not,
    Or,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import NestedField, StructType

from cedarberg.catalog.errors import ForbiddenError
from cedarberg.catalog.planning.fields import covered
from cedarberg.catalog.planning.grants import ScanGrant
from cedarberg.catalog.planning.mask_actions import MASK_TO_FIXED_VALUE, REPLACE_WITH_NULL
from cedarberg.catalog.planning.masks import applies
from cedarberg.catalog.planning.values import to_json

Document = dict[str, Any]

_HIDE = "hide"  # a treatment, not an action: resolved to an action per field type
_CLEAR = ""
_PARTIAL = "partial"  # a grant treats fields inside differently: walk into the struct


@dataclass(frozen=True, slots=True)
class ReadView:
    """The grants a restricted caller loads a table with, and a key naming their content (the
    load's ETag and its cached body vary by it, so no caller is answered another's view)."""

    grants: tuple[ScanGrant, ...]
    key: str


def read_restrictions(metadata: TableMetadata, grants: Sequence[ScanGrant]) -> Document | None:
    """The ReadRestrictions document `grants` impose on reading `metadata`'s table (None: none)."""
    if not grants:
        raise ForbiddenError("no read of this table is allowed")
    if any(not grant.restricted for grant in grants):
        return None
    current = metadata.schema()
    for grant in grants:
        _check_masks(current, grant)
    projections = _projections(metadata.schemas, grants)
    document: Document = {}
    if projections:
        document["required-column-projections"] = projections
    row_filter = _row_filter(current, grants)
    if row_filter is not None:
        document["required-row-filter"] = row_filter
    return document


# -- projections -------------------------------------------------------------------------------


def _check_masks(schema: Schema, grant: ScanGrant) -> None:
    for column, _action in grant.masks:
        try:
            schema.find_field(column, case_sensitive=True)
        except ValueError:
            # A renamed column would otherwise escape its mask: refuse until the policy follows.
            raise ForbiddenError(
                f"a required mask names a column this table does not have: {column}"
            ) from None


def _treatment(grant: ScanGrant, name: str) -> str:
    """How `grant` lets the field `name` be read: as is, masked (the action), hidden, or partly."""
    masks = dict(grant.masks)
    if name in masks:
        return masks[name]
    if covered(name, frozenset(masks)):
        return _HIDE  # inside a masked struct (reached only when another grant differs there)
    prefix = name + "."
    inner_masks = any(column.startswith(prefix) for column in masks)
    if grant.columns is None or covered(name, grant.columns):
        return _PARTIAL if inner_masks else _CLEAR
    if inner_masks or any(column.startswith(prefix) for column in grant.columns):
        return _PARTIAL
    return _HIDE


def _combined(treatments: Sequence[str]) -> str:
    """What every grant allows: as is only if all show it; one shared mask; else hidden."""
    if _HIDE in treatments:
        return _HIDE
    masks = {t for t in treatments if t not in (_CLEAR, _PARTIAL)}
    if _PARTIAL in treatments:
        return _HIDE if masks else _PARTIAL  # a whole-struct mask and a partial view: hidden
    if not masks:
        return _CLEAR
    return masks.pop() if len(masks) == 1 else _HIDE


@dataclass(slots=True)
class _Target:
    treatment: str
    fields: list[NestedField]  # the field in every schema that has it (its types and nullability)
    parents: frozenset[int]  # ids of the structs holding it, in any schema


def _walk(
    struct: StructType, prefix: str, parents: frozenset[int], grants: Sequence[ScanGrant]
) -> Iterator[tuple[NestedField, str, frozenset[int]]]:
    for field in struct.fields:
        name = prefix + field.name
        treatment = _combined([_treatment(grant, name) for grant in grants])
        if treatment == _CLEAR:
            continue
        if treatment == _PARTIAL:
            if isinstance(field.field_type, StructType):
                yield from _walk(field.field_type, name + ".", parents | {field.field_id}, grants)
                continue
            treatment = _HIDE  # a list or map read differently inside: hidden whole
        yield field, treatment, parents


def _projections(schemas: Sequence[Schema], grants: Sequence[ScanGrant]) -> list[Document]:
    targets: dict[int, _Target] = {}
    for schema in schemas:
        for field, treatment, parents in _walk(schema.as_struct(), "", frozenset(), grants):
            target = targets.get(field.field_id)
            if target is None:
                targets[field.field_id] = _Target(treatment, [field], parents)
                continue
            # A field renamed between schemas may be treated differently under each name.
            target.treatment = treatment if target.treatment == treatment else _HIDE
            target.fields.append(field)
            target.parents |= parents
    projections = []
    for field_id in sorted(targets):
        target = targets[field_id]
        if target.parents & targets.keys():
            continue  # inside a projected struct: the spec forbids projecting both
        projections.append({"field-id": field_id, "action": _action(target)})
    return projections


def _action(target: _Target) -> str:
    fields = target.fields
    name = fields[-1].name
    if target.treatment != _HIDE:
        action = target.treatment
        for field in fields:
            if not applies(action, field.field_type, field.required):
                raise ForbiddenError(
                    f"a required mask ({action}) does not apply to column {name} of type {field.field_type}"
                )
        return action
    if all(applies(REPLACE_WITH_NULL, field.field_type, field.required) for field in fields):
        return REPLACE_WITH_NULL
    if all(applies(MASK_TO_FIXED_VALUE, field.field_type, field.required) for field in fields):
        return MASK_TO_FIXED_VALUE
    raise ForbiddenError(f"column {name} cannot be hidden from you in a form readers apply")


# -- row filter --------------------------------------------------------------------------------


def _row_filter(schema: Schema, grants: Sequence[ScanGrant]) -> Document | bool | None:
    filters = [grant.row_filter for grant in grants if grant.row_filter is not None]
    if len(filters) < len(grants):
        return None  # one grant allows every row
    combined = functools.reduce(Or, filters)
    try:
        bound = bind(schema, combined, case_sensitive=True)
    except (ValueError, TypeError):
        raise ForbiddenError("a required row filter does not apply to this table") from None
    if isinstance(bound, AlwaysTrue):
        return None
    return _predicate(bound)


_COMPARISONS: dict[type[BoundLiteralPredicate], str] = {
    BoundEqualTo: "eq",
    BoundNotEqualTo: "not-eq",
    BoundLessThan: "lt",
    BoundLessThanOrEqual: "lt-eq",
    BoundGreaterThan: "gt",
    BoundGreaterThanOrEqual: "gt-eq",
    BoundStartsWith: "starts-with",
    BoundNotStartsWith: "not-starts-with",
}
_UNARY: dict[type[BoundUnaryPredicate], str] = {
    BoundIsNull: "is-null",
    BoundNotNull: "not-null",
    BoundIsNaN: "is-nan",
    BoundNotNaN: "not-nan",
}
_SETS: dict[type[BoundSetPredicate], str] = {BoundIn: "in", BoundNotIn: "not-in"}


def _predicate(expr: BooleanExpression) -> Document | bool:
    """A bound expression as the spec's Predicate, with field-id references (IdReference)."""
    if isinstance(expr, AlwaysTrue):
        return True
    if isinstance(expr, AlwaysFalse):
        return False
    if isinstance(expr, And | Or):
        kind = "and" if isinstance(expr, And) else "or"
        return {"type": kind, "left": _predicate(expr.left), "right": _predicate(expr.right)}
    if isinstance(expr, Not):
        return {"type": "not", "child": _predicate(expr.child)}
    if isinstance(expr, BoundLiteralPredicate) and type(expr) in _COMPARISONS:
        field = expr.term.ref().field
        value = to_json(field.field_type, expr.literal.value)
        return {
            "type": _COMPARISONS[type(expr)],
            "left": _reference(field),
            "right": {"type": "literal", "value": value},
        }
    if isinstance(expr, BoundUnaryPredicate) and type(expr) in _UNARY:
        return {"type": _UNARY[type(expr)], "child": _reference(expr.term.ref().field)}
    if isinstance(expr, BoundSetPredicate) and type(expr) in _SETS:
        field = expr.term.ref().field
        values = sorted((to_json(field.field_type, lit.value) for lit in expr.literals), key=repr)
        return {"type": _SETS[type(expr)], "child": _reference(field), "values": values}
    # Never silently dropped: a filter this cannot write would let every row through.
    raise ForbiddenError("a required row filter cannot be expressed to readers")


def _reference(field: NestedField) -> Document:
    return {"type": "reference", "id": field.field_id}
