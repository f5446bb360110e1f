"""Scan restrictions: which columns a caller may touch and which rows it must be limited to.

The gateway decides the grants (from policy); this module only enforces them, knowing nothing of
where they came from. A request is covered by a grant when every field it references (its
`select`, or every column, every field its filter reads, its `stats-fields`, and every column the
table is partitioned by, whose values the tasks' partition tuples and file paths reveal) is a
granted column or lies inside one (granting `address` covers `address.zip`). The row filters of
all covering grants are OR-ed (a grant without a filter lifts the restriction) and AND-ed into the
scan filter by the planner.

A masked column (`masks`) may be read only through its mask. Planning hands out files, which hold
the raw values, and the planner cannot apply a mask to them: a scan touching a masked column (or a
field inside one, or a struct holding one) is not covered by that grant (fail closed). Readers that
apply masks get them from loadTable (`catalog.planning.read_restrictions`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, Or
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.schema import Schema

from cedarberg.catalog.errors import ForbiddenError, InvalidRequestError
from cedarberg.catalog.planning.fields import covered

_MAX_NAMED_IN_MESSAGE = 10


@dataclass(frozen=True, slots=True)
class ScanGrant:
    """One way the caller may scan: columns it may touch (None: every column) and a row filter it must accept (None: every row)."""  # noqa: E501

    columns: frozenset[str] | None
    row_filter: BooleanExpression | None  # unbound pyiceberg expression
    masks: tuple[tuple[str, str], ...] = ()  # (column, spec action): readable only masked

    @property
    def restricted(self) -> bool:
        return self.columns is not None or self.row_filter is not None or bool(self.masks)


UNRESTRICTED = (ScanGrant(None, None),)


def full_name(schema: Schema, name: str, case_sensitive: bool) -> str:
    """The schema's dotted name of the field `name` refers to. Raises InvalidRequestError."""
    try:
        field = schema.find_field(name, case_sensitive)
    except ValueError:
        raise InvalidRequestError(f"no such column in the scan schema: {name!r}") from None
    found = schema.find_column_name(field.field_id)
    if found is None:  # pragma: no cover - find_field succeeded, so the id has a name
        raise InvalidRequestError(f"no such column in the scan schema: {name!r}")
    return found


def referenced_fields(
    schema: Schema, select: Sequence[str] | None, row_filter: BooleanExpression, case_sensitive: bool
) -> frozenset[str]:
    """Full names of what a request reads: its selected columns (every top-level column when it
    selects none) and every field its filter references."""
    if select is None or "*" in select:
        names = {field.name for field in schema.fields}
    else:
        names = {full_name(schema, name, case_sensitive) for name in select}
    try:
        bound = bind(schema, row_filter, case_sensitive)
    except (ValueError, TypeError) as err:
        raise InvalidRequestError(f"filter does not apply to the table: {_first_line(err)}") from None
    for field_id in extract_field_ids(bound):
        name = schema.find_column_name(field_id)
        if name is not None:
            names.add(name)
    return frozenset(names)


def _masked(name: str, masked: frozenset[str]) -> bool:
    """Whether reading `name` reads a masked column: it is one, lies inside one, or holds one."""
    return covered(name, masked) or any(column.startswith(name + ".") for column in masked)


def _uncovered(grant: ScanGrant, fields: Iterable[str]) -> list[str]:
    columns = grant.columns
    masked = frozenset(column for column, _action in grant.masks)
    return sorted(
        name
        for name in fields
        if (columns is not None and not covered(name, columns)) or _masked(name, masked)
    )


def effective_row_filter(
    grants: Sequence[ScanGrant], schema: Schema, fields: frozenset[str]
) -> BooleanExpression | None:
    """The row filter the scan must apply (None: none), given the fields it references.

    Raises ForbiddenError when no grant covers `fields` (naming what the closest grant lacks),
    or when a required row filter cannot be bound to `schema` (fail closed)."""
    if not grants:
        raise ForbiddenError("no scan of this table is allowed")
    covering: list[ScanGrant] = []
    closest: list[str] | None = None
    for grant in grants:
        missing = _uncovered(grant, fields)
        if not missing:
            covering.append(grant)
        elif closest is None or len(missing) < len(closest):
            closest = missing
    if not covering:
        assert closest is not None
        shown = ", ".join(closest[:_MAX_NAMED_IN_MESSAGE])
        more = (
            f" and {len(closest) - _MAX_NAMED_IN_MESSAGE} more"
            if len(closest) > _MAX_NAMED_IN_MESSAGE
            else ""
        )
        raise ForbiddenError(f"not allowed to scan these columns: {shown}{more}")
    filters = [grant.row_filter for grant in covering if grant.row_filter is not None]
    if len(filters) < len(covering):
        return None  # one covering grant allows every row
    combined = functools.reduce(Or, filters)
    try:
        # Policy filters name columns exactly: bound case-sensitively whatever the request says.
        bind(schema, combined, case_sensitive=True)
    except (ValueError, TypeError):
        raise ForbiddenError("a required row filter does not apply to this table") from None
    return combined


def restrict(request_filter: BooleanExpression, policy_filter: BooleanExpression | None) -> BooleanExpression:
    """The request's filter limited to the rows the policy allows."""
    if policy_filter is None:
        return request_filter
    if isinstance(request_filter, AlwaysTrue):
        return policy_filter
    return And(request_filter, policy_filter)


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0][:200]
