"""Statements written once in SQLAlchemy Core, compiled once per dialect, run at driver speed.

    GET = Sql(select(t.c.a).where(t.c.k == bindparam("k")))
    rows = await conn.execute(GET, {"k": 1})

SQLAlchemy writes the SQL portably (schema, quoting, casts, dialect differences); compiling a
statement costs tens of microseconds, far more than running it on SQLite, so each `Sql` keeps its
compiled text per dialect and the drivers (catalog.store.drivers) hand that text with positional
arguments straight to sqlite3 or asyncpg, whose own caches keep the prepared statement.

Invariants:
- Values come only through named `bindparam`s (literals in the clause are fixed values of the
  shape, compiled once); a statement never embeds a caller's value in its text.
- A statement whose shape depends on the call (optional conditions, IN lists of some length)
  is built per shape by a cached factory (`functools.lru_cache`), so its shapes compile once too.
- Expanding ("post-compile") parameters are refused at compile time: their text is per call.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Integer, Table
from sqlalchemy import bindparam as param
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, ColumnElement

NO_PARAMS: Mapping[str, Any] = {}
LIMIT = param("limit", type_=Integer)  # the row limit of a listing or a batch


def values_of(table: Table, *names: str) -> dict[str, Any]:
    """INSERT values: a bind parameter per column, named like the column."""
    return {name: param(name, type_=table.c[name].type) for name in names}


def in_list(column: ColumnElement[Any], prefix: str, count: int) -> ColumnElement[bool]:
    """`column IN (:prefix0, ..., :prefix{count-1})`: one shape per list length."""
    return column.in_([param(f"{prefix}{i}", type_=column.type) for i in range(count)])


def in_params(prefix: str, values: Collection[Any]) -> dict[str, Any]:
    """The parameters of an `in_list(column, prefix, len(values))`."""
    return {f"{prefix}{i}": value for i, value in enumerate(values)}


class Compiled:
    """A statement's text for one dialect, the order of its positional arguments, and the row
    type of its results (None: the statement returns no rows)."""

    __slots__ = ("_binds", "row_type", "sql")

    def __init__(
        self,
        sql: str,
        binds: Sequence[tuple[str, Any, bool, Callable[[Any], Any] | None]],
        row_type: type[tuple[Any, ...]] | None,
    ) -> None:
        self.sql = sql
        self._binds = tuple(binds)
        self.row_type = row_type

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional arguments for `params` (fixed values of the shape filled in)."""
        out = []
        for name, fixed, from_params, process in self._binds:
            value = params[name] if from_params else fixed
            out.append(value if process is None or value is None else process(value))
        return tuple(out)


class Sql:
    """One statement shape; `compiled(dialect)` compiles it on first use for that dialect."""

    __slots__ = ("_by_dialect", "clause")

    def __init__(self, clause: ClauseElement) -> None:
        self.clause = clause
        self._by_dialect: dict[str, Compiled] = {}

    def compiled(self, dialect: Dialect) -> Compiled:
        found = self._by_dialect.get(dialect.name)
        if found is None:
            found = self._by_dialect[dialect.name] = _compile(self.clause, dialect)
        return found


def _compile(clause: ClauseElement, dialect: Dialect) -> Compiled:
    compiled = cast("SQLCompiler", clause.compile(dialect=dialect))
    text = compiled.string
    if "POSTCOMPILE" in text:
        raise ValueError("expanding parameters have no fixed text: build one shape per list length")
    names = compiled.positiontup or []
    processors = compiled._bind_processors
    binds: list[tuple[str, Any, bool, Callable[[Any], Any] | None]] = []
    for name in names:
        bind = compiled.binds[name]
        process = processors.get(name)
        binds.append((name, bind.value, bind.required, process if callable(process) else None))
    columns = getattr(clause, "selected_columns", None)
    row_type: type[tuple[Any, ...]] | None = None
    if columns is not None:
        row_type = _row_type([column.key for column in columns])
    return Compiled(text, binds, row_type)


def _row_type(names: list[str]) -> type[tuple[Any, ...]]:
    """A named tuple type for result rows (attribute access, `_asdict()`)."""
    return namedtuple("Row", names, rename=True)


class Rows:
    """What a statement returned: its rows (named tuples) and how many rows it changed."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        """The first column of the first row, None if there is no row."""
        return self.rows[0][0] if self.rows else None

    def scalar_one(self) -> Any:
        if len(self.rows) != 1:
            raise LookupError(f"expected exactly one row, got {len(self.rows)}")
        return self.rows[0][0]
