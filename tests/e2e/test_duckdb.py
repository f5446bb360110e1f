"""DuckDB 1.5.5 (iceberg extension) against the gateway, and Spark <-> DuckDB across engines.

DuckDB attaches ``session_gateway`` as ``cat`` (fixture ``duckdb_conn``) and commits every DML
statement through ``POST /v1/{prefix}/transactions/commit``. pyiceberg (and Spark, for the
cross-engine tests) read back what DuckDB wrote, so a table that only DuckDB can read still fails.
Each test works in a namespace of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.engines import make_catalog

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.duckdb


def unique(label: str) -> str:
    return f"dk_{label}_{uuid.uuid4().hex[:8]}"


def query(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in con.execute(sql).fetchall()]


def spark_rows(spark: SparkSession, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(sql).collect()]


@pytest.fixture
def pycat(session_gateway: Any) -> Iterator[RestCatalog]:
    catalog = make_catalog(session_gateway)
    yield catalog
    catalog.close()


def pyiceberg_rows(catalog: RestCatalog, identifier: str, *columns: str) -> list[tuple[Any, ...]]:
    table = catalog.load_table(identifier).scan().to_arrow().sort_by(columns[0])
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


# -- DuckDB alone ------------------------------------------------------------------------------------


def test_attach_lists_catalog(duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog) -> None:
    ns = unique("attach")
    pycat.create_namespace(ns)
    schemas = {
        row[0]
        for row in query(duckdb_conn, "SELECT schema_name FROM duckdb_schemas() WHERE database_name = 'cat'")
    }
    assert ns in schemas
    databases = {row[0] for row in query(duckdb_conn, "SELECT database_name FROM duckdb_databases()")}
    assert "cat" in databases


def test_create_schema_table_insert_select(
    duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog
) -> None:
    ns = unique("basic")
    duckdb_conn.execute(f"CREATE SCHEMA cat.{ns}")
    assert pycat.namespace_exists(ns)

    duckdb_conn.execute(f"CREATE TABLE cat.{ns}.items (id INTEGER, name VARCHAR, price DOUBLE)")
    assert pycat.table_exists(f"{ns}.items")
    duckdb_conn.execute(
        f"INSERT INTO cat.{ns}.items VALUES (1, 'apple', 1.5), (2, 'pear', 2.0), (3, 'fig', 3.25)"
    )
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.items VALUES (4, 'kiwi', 0.5)")

    assert query(duckdb_conn, f"SELECT id, name, price FROM cat.{ns}.items ORDER BY id") == [
        (1, "apple", 1.5),
        (2, "pear", 2.0),
        (3, "fig", 3.25),
        (4, "kiwi", 0.5),
    ]
    assert query(duckdb_conn, f"SELECT count(*), sum(price) FROM cat.{ns}.items WHERE id > 1") == [(3, 5.75)]

    table = pycat.load_table(f"{ns}.items")
    assert len(table.snapshots()) == 2
    assert table.current_snapshot().summary["total-records"] == "4"
    assert pyiceberg_rows(pycat, f"{ns}.items", "id", "name") == [
        (1, "apple"),
        (2, "pear"),
        (3, "fig"),
        (4, "kiwi"),
    ]

    tables = query(
        duckdb_conn,
        f"SELECT table_name FROM duckdb_tables() WHERE database_name = 'cat' AND schema_name = '{ns}'",
    )
    assert tables == [("items",)]


def test_update_and_delete(duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog) -> None:
    ns = unique("dml")
    duckdb_conn.execute(f"CREATE SCHEMA cat.{ns}")
    duckdb_conn.execute(f"CREATE TABLE cat.{ns}.t (id INTEGER, name VARCHAR)")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.t VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")

    duckdb_conn.execute(f"UPDATE cat.{ns}.t SET name = 'B' WHERE id = 2")
    assert query(duckdb_conn, f"SELECT id, name FROM cat.{ns}.t ORDER BY id") == [
        (1, "a"),
        (2, "B"),
        (3, "c"),
        (4, "d"),
    ]
    duckdb_conn.execute(f"DELETE FROM cat.{ns}.t WHERE id IN (1, 3)")
    assert query(duckdb_conn, f"SELECT id, name FROM cat.{ns}.t ORDER BY id") == [(2, "B"), (4, "d")]

    table = pycat.load_table(f"{ns}.t")
    sequence_numbers = [s.sequence_number for s in table.snapshots()]
    assert len(sequence_numbers) >= 3
    assert sequence_numbers == sorted(set(sequence_numbers))
    assert pyiceberg_rows(pycat, f"{ns}.t", "id", "name") == [(2, "B"), (4, "d")]

    fresh = pycat.load_table(f"{ns}.t")
    assert fresh.metadata_location == table.metadata_location
    assert len(fresh.metadata.metadata_log) == len(table.snapshots())


def test_transaction_commit_and_rollback(duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog) -> None:
    ns = unique("txn")
    duckdb_conn.execute(f"CREATE SCHEMA cat.{ns}")
    duckdb_conn.execute(f"CREATE TABLE cat.{ns}.a (id INTEGER)")
    duckdb_conn.execute(f"CREATE TABLE cat.{ns}.b (id INTEGER)")
    before_a = pycat.load_table(f"{ns}.a").metadata_location
    before_b = pycat.load_table(f"{ns}.b").metadata_location

    duckdb_conn.execute("BEGIN TRANSACTION")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.a VALUES (1), (2)")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.b VALUES (10)")
    duckdb_conn.execute("ROLLBACK")
    assert pycat.load_table(f"{ns}.a").metadata_location == before_a
    assert pycat.load_table(f"{ns}.b").metadata_location == before_b
    assert query(duckdb_conn, f"SELECT count(*) FROM cat.{ns}.a") == [(0,)]

    duckdb_conn.execute("BEGIN TRANSACTION")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.a VALUES (1), (2)")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.a VALUES (3)")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.b VALUES (10)")
    duckdb_conn.execute("COMMIT")  # both tables in one POST .../transactions/commit

    assert query(duckdb_conn, f"SELECT id FROM cat.{ns}.a ORDER BY id") == [(1,), (2,), (3,)]
    assert query(duckdb_conn, f"SELECT id FROM cat.{ns}.b") == [(10,)]
    assert pyiceberg_rows(pycat, f"{ns}.a", "id") == [(1,), (2,), (3,)]
    assert pyiceberg_rows(pycat, f"{ns}.b", "id") == [(10,)]


def test_drop_table_and_schema(duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog) -> None:
    ns = unique("drop")
    duckdb_conn.execute(f"CREATE SCHEMA cat.{ns}")
    duckdb_conn.execute(f"CREATE TABLE cat.{ns}.t (id INTEGER)")
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.t VALUES (1)")
    duckdb_conn.execute(f"DROP TABLE cat.{ns}.t")
    assert not pycat.table_exists(f"{ns}.t")
    duckdb_conn.execute(f"DROP SCHEMA cat.{ns}")
    assert not pycat.namespace_exists(ns)


def test_reads_table_written_by_pyiceberg(duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog) -> None:
    ns = unique("frompy")
    pycat.create_namespace(ns)
    data = pa.table({"id": pa.array([3, 1, 2], pa.int64()), "tag": pa.array(["c", "a", "b"], pa.string())})
    table = pycat.create_table(f"{ns}.t", schema=data.schema)
    table.append(data)
    table.delete("id = 2")
    assert query(duckdb_conn, f"SELECT id, tag FROM cat.{ns}.t ORDER BY id") == [(1, "a"), (3, "c")]


# -- across engines -------------------------------------------------------------------------------


@pytest.mark.spark
def test_duckdb_reads_spark_written_table(
    spark: SparkSession, duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog
) -> None:
    ns = unique("fromspark")
    spark.sql(f"CREATE NAMESPACE cat.{ns}")
    spark.sql(
        f"CREATE TABLE cat.{ns}.sales (id BIGINT, region STRING, amount DECIMAL(10, 2), day DATE) "
        "USING iceberg PARTITIONED BY (region) "
        "TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read')"
    )
    spark.sql(
        f"INSERT INTO cat.{ns}.sales VALUES "
        "(1, 'eu', 10.50, DATE '2024-01-01'), (2, 'us', 20.00, DATE '2024-01-02'), "
        "(3, 'eu', 30.25, DATE '2024-01-03'), (4, 'apac', 40.00, DATE '2024-01-04')"
    )
    spark.sql(f"INSERT INTO cat.{ns}.sales VALUES (5, 'us', 50.00, DATE '2024-01-05')")
    spark.sql(f"DELETE FROM cat.{ns}.sales WHERE id = 3")  # a position delete file

    got = query(
        duckdb_conn,
        f"SELECT id, region, CAST(amount AS DOUBLE), day::VARCHAR FROM cat.{ns}.sales ORDER BY id",
    )
    assert got == [
        (1, "eu", 10.5, "2024-01-01"),
        (2, "us", 20.0, "2024-01-02"),
        (4, "apac", 40.0, "2024-01-04"),
        (5, "us", 50.0, "2024-01-05"),
    ]
    assert query(
        duckdb_conn, f"SELECT region, count(*) FROM cat.{ns}.sales GROUP BY region ORDER BY region"
    ) == [
        ("apac", 1),
        ("eu", 1),
        ("us", 2),
    ]
    assert pyiceberg_rows(pycat, f"{ns}.sales", "id") == [(1,), (2,), (4,), (5,)]


@pytest.mark.spark
def test_spark_reads_duckdb_written_table(
    spark: SparkSession, duckdb_conn: duckdb.DuckDBPyConnection, pycat: RestCatalog
) -> None:
    ns = unique("tospark")
    duckdb_conn.execute(f"CREATE SCHEMA cat.{ns}")
    duckdb_conn.execute(f"CREATE TABLE cat.{ns}.t (id INTEGER, name VARCHAR, score DOUBLE)")
    duckdb_conn.execute(
        f"INSERT INTO cat.{ns}.t VALUES (1, 'a', 1.0), (2, 'b', 2.0), (3, 'c', 3.0), (4, 'd', 4.0)"
    )
    duckdb_conn.execute(f"UPDATE cat.{ns}.t SET score = 20.0 WHERE id = 2")
    duckdb_conn.execute(f"DELETE FROM cat.{ns}.t WHERE id = 4")

    assert spark_rows(spark, f"SELECT id, name, score FROM cat.{ns}.t ORDER BY id") == [
        (1, "a", 1.0),
        (2, "b", 20.0),
        (3, "c", 3.0),
    ]

    # Spark appends to the DuckDB table; DuckDB sees it.
    spark.sql(f"INSERT INTO cat.{ns}.t VALUES (5, 'e', 5.0)")
    assert query(duckdb_conn, f"SELECT id, name, score FROM cat.{ns}.t ORDER BY id") == [
        (1, "a", 1.0),
        (2, "b", 20.0),
        (3, "c", 3.0),
        (5, "e", 5.0),
    ]
    # And DuckDB writes again on top of Spark's snapshot.
    duckdb_conn.execute(f"INSERT INTO cat.{ns}.t VALUES (6, 'f', 6.0)")
    assert spark_rows(spark, f"SELECT count(*), sum(score) FROM cat.{ns}.t") == [(5, 35.0)]
    assert pyiceberg_rows(pycat, f"{ns}.t", "id") == [(1,), (2,), (3,), (5,), (6,)]
