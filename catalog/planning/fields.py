"""Dotted field names (`address.zip`): a granted column covers itself and every field inside it.

Names only, no schema: the policy loader checks `@columns` and `@mask` with this before any table
is known (and without pyiceberg); the planner (`catalog.planning.grants`) and the read
restrictions apply the same rule to a table's fields.
"""

from __future__ import annotations


def covered(name: str, columns: frozenset[str]) -> bool:
    """Whether the dotted field `name` is one of `columns` or lies inside one."""
    parts = name.split(".")
    return any(".".join(parts[:end]) in columns for end in range(1, len(parts) + 1))
