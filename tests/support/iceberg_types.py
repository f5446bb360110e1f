"""Iceberg schema documents (REST wire JSON) of chosen nesting, for the bad-input and fuzz suites.

nested_type("list", 20)            # list<list<...<long>>>, 20 levels
schema_of(nested_type("struct", 5))
"""

from __future__ import annotations

from typing import Any, Literal

NestedKind = Literal["struct", "list", "map"]


def nested_type(kind: NestedKind, levels: int, leaf: Any = "long", first_id: int = 2) -> Any:
    """`leaf` wrapped in `levels` types of `kind`, with distinct field ids from `first_id` up."""
    nested = leaf
    next_id = first_id
    for level in range(levels):
        if kind == "struct":
            field = {"id": next_id, "name": f"f{level}", "type": nested, "required": False}
            nested = {"type": "struct", "fields": [field]}
            next_id += 1
        elif kind == "list":
            nested = {"type": "list", "element-id": next_id, "element": nested, "element-required": False}
            next_id += 1
        else:
            nested = {
                "type": "map",
                "key-id": next_id,
                "key": "string",
                "value-id": next_id + 1,
                "value": nested,
                "value-required": False,
            }
            next_id += 2
    return nested


def schema_of(*field_types: Any) -> dict[str, Any]:
    """A schema (id 0) with one optional field `c<i>` of each type, ids 1000 up (clear of the
    ids `nested_type` gives nested fields)."""
    fields = [
        {"id": 1000 + index, "name": f"c{index}", "type": field_type, "required": False}
        for index, field_type in enumerate(field_types)
    ]
    return {"type": "struct", "schema-id": 0, "fields": fields}


def left_deep_filter(predicates: int, column: str = "c0") -> dict[str, Any]:
    """`column = 0 AND column = 1 AND ...`, folded left-deep as engines build it: one level of
    nesting per predicate."""
    expression: dict[str, Any] = {"type": "eq", "term": column, "value": 0}
    for value in range(1, predicates):
        right = {"type": "eq", "term": column, "value": value}
        expression = {"type": "and", "left": expression, "right": right}
    return expression
