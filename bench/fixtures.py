"""The catalog content every server under test gets before it is measured.

    bench              namespace (Cedarberg: writers = etl)
      t                read table: 5 appended snapshots, loadTable body of a few KB
      c                table for sequential commits and 8 writers on one table
      c0 .. c7         one table per writer for 8 writers on 8 tables
    scratch            namespace where createTable puts its tables (Cedarberg: writers = etl)

Reads touch only ``bench`` and ``bench.t``; the write scenarios change other objects, so the
read scenarios see the same documents whatever ran before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

NAMESPACE = "bench"
SCRATCH_NAMESPACE = "scratch"
READ_TABLE = "t"
COMMIT_TABLE = "c"
WRITERS = 8
SNAPSHOTS = 5


def writer_table(index: int) -> str:
    return f"{COMMIT_TABLE}{index}"


def seed(catalog: Catalog, namespace_properties: Mapping[str, str] | None = None) -> None:
    """Create the namespaces and tables above through ``catalog`` (pyiceberg)."""
    import pyarrow as pa

    properties = dict(namespace_properties or {})
    catalog.create_namespace(NAMESPACE, properties)
    catalog.create_namespace(SCRATCH_NAMESPACE, properties)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
    table = catalog.create_table(f"{NAMESPACE}.{READ_TABLE}", schema)
    for i in range(SNAPSHOTS):
        table.append(pa.table({"id": [i], "name": [f"row {i}"], "amount": [i * 1.5]}, schema=schema))
    for name in [COMMIT_TABLE, *(writer_table(i) for i in range(WRITERS))]:
        catalog.create_table(f"{NAMESPACE}.{name}", schema)
