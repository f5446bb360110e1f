"""Acceptance tests: real PySpark 3.5 + Iceberg 1.10 runtime against the real gateway.

All tests share one SparkSession (fixture ``spark``, catalog ``cat``) and one gateway
(``session_gateway``); each test works in namespaces of its own. Besides what Spark reads back,
the tests look at what the gateway stores (``GET .../tables/{t}``, ``.../views/{v}``) and at the
files in the warehouse directory, so a catalog that answers Spark but stores the wrong metadata
still fails.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

import pytest
import requests

from tests.support.gateway import GatewayProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

HTTP_TIMEOUT = 15
FAR_FUTURE = "TIMESTAMP '2100-01-01 00:00:00'"
SERVER_ERROR = re.compile(r"^.*cedarberg\.access \S+ \S+ 5\d\d .*$", re.MULTILINE)


# -- helpers -----------------------------------------------------------------------------------


def unique(label: str) -> str:
    """A fresh lower-case identifier, e.g. ``sp_merge_1a2b3c4d``."""
    return f"sp_{label}_{uuid.uuid4().hex[:8]}"


def rows(spark: SparkSession, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(query).collect()]


def new_namespace(spark: SparkSession, label: str) -> str:
    name = unique(label)
    spark.sql(f"CREATE NAMESPACE cat.{name}")
    return name


def local_path(location: str) -> Path:
    """``file:/x``, ``file:///x`` or ``/x`` as a local path."""
    parsed = urlparse(location)
    assert parsed.scheme in ("", "file"), location
    return Path(unquote(parsed.path))


def files_under(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*") if p.is_file()} if directory.exists() else set()


def snapshots(spark: SparkSession, table: str) -> list[tuple[int, str, str]]:
    """``(snapshot_id, committed_at 'yyyy-MM-dd HH:mm:ss.SSS' UTC, operation)``, oldest first."""
    return rows(
        spark,
        "SELECT snapshot_id, date_format(committed_at, 'yyyy-MM-dd HH:mm:ss.SSS'), operation "
        f"FROM {table}.snapshots ORDER BY committed_at",
    )


def exception_text(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return f"{type(excinfo.value).__name__}: {excinfo.value}"


class Rest:
    """Read what the gateway stores, straight over the REST API."""

    def __init__(self, gateway: GatewayProcess, warehouse: str | None = None) -> None:
        self.base = gateway.url
        query = {"warehouse": warehouse} if warehouse else None
        config = requests.get(f"{self.base}/v1/config", params=query, timeout=HTTP_TIMEOUT)
        config.raise_for_status()
        prefix = config.json().get("overrides", {}).get("prefix")
        self.root = f"{self.base}/v1/{quote(prefix, safe='')}" if prefix else f"{self.base}/v1"

    @staticmethod
    def ns_path(namespace: str) -> str:
        return quote("\x1f".join(namespace.split(".")), safe="")

    def get(self, path: str) -> requests.Response:
        return requests.get(f"{self.root}/{path}", timeout=HTTP_TIMEOUT)

    def namespace(self, namespace: str) -> dict[str, Any]:
        response = self.get(f"namespaces/{self.ns_path(namespace)}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def table_status(self, namespace: str, table: str) -> int:
        return self.get(f"namespaces/{self.ns_path(namespace)}/tables/{quote(table)}").status_code

    def table(self, namespace: str, table: str) -> dict[str, Any]:
        """The ``metadata`` of ``loadTable`` (``metadata-location`` added)."""
        response = self.get(f"namespaces/{self.ns_path(namespace)}/tables/{quote(table)}")
        assert response.status_code == 200, response.text
        body = response.json()
        metadata: dict[str, Any] = body["metadata"]
        metadata["metadata-location"] = body.get("metadata-location")
        return metadata

    def view_status(self, namespace: str, view: str) -> int:
        return self.get(f"namespaces/{self.ns_path(namespace)}/views/{quote(view)}").status_code

    def view(self, namespace: str, view: str) -> dict[str, Any]:
        response = self.get(f"namespaces/{self.ns_path(namespace)}/views/{quote(view)}")
        assert response.status_code == 200, response.text
        metadata: dict[str, Any] = response.json()["metadata"]
        return metadata


def current_schema(metadata: dict[str, Any]) -> dict[str, Any]:
    schema_id = metadata["current-schema-id"]
    return next(s for s in metadata["schemas"] if s["schema-id"] == schema_id)


def default_spec(metadata: dict[str, Any]) -> dict[str, Any]:
    spec_id = metadata["default-spec-id"]
    return next(s for s in metadata["partition-specs"] if s["spec-id"] == spec_id)


def field_ids(schema: dict[str, Any]) -> dict[str, int]:
    return {f["name"]: f["id"] for f in schema["fields"]}


def all_field_ids(schema: dict[str, Any]) -> list[int]:
    """Every id in a schema: fields at any depth, list elements, map keys and values."""
    found: list[int] = []

    def visit(type_: Any) -> None:
        if not isinstance(type_, dict):
            return
        if type_.get("type") in ("struct", None) and "fields" in type_:
            for field in type_["fields"]:
                found.append(field["id"])
                visit(field["type"])
        elif type_["type"] == "list":
            found.append(type_["element-id"])
            visit(type_["element"])
        elif type_["type"] == "map":
            found.extend((type_["key-id"], type_["value-id"]))
            visit(type_["key"])
            visit(type_["value"])

    visit(schema)
    return found


@pytest.fixture(scope="module")
def rest(session_gateway: GatewayProcess) -> Rest:
    return Rest(session_gateway)


@pytest.fixture(autouse=True)
def _gateway_log(session_gateway: GatewayProcess) -> Iterator[None]:
    """Shows what the gateway logged while the test ran, and fails on any 5xx answer: Spark hides
    some failed requests (metrics reports) and turns a 5xx on commit into "state unknown"."""
    start = len(session_gateway.log_text())
    print(f"gateway log: {session_gateway.log_path}")
    yield
    logged = session_gateway.log_text()[start:]
    print(logged[-8000:])
    server_errors = SERVER_ERROR.findall(logged)
    if server_errors:
        pytest.fail(f"the gateway answered 5xx: {server_errors}")


# -- namespaces and partitioned tables -----------------------------------------------------------


def test_nested_namespaces_and_partitioned_table(spark: SparkSession, rest: Rest) -> None:
    top = unique("ns")
    nested = f"{top}.b"
    spark.sql(f"CREATE NAMESPACE cat.{top} WITH DBPROPERTIES ('purpose' = 'e2e')")
    spark.sql(f"CREATE NAMESPACE cat.{nested}")

    assert top in {r[0] for r in rows(spark, "SHOW NAMESPACES IN cat")}
    assert nested not in {r[0] for r in rows(spark, "SHOW NAMESPACES IN cat")}
    assert rows(spark, f"SHOW NAMESPACES IN cat.{top}") == [(nested,)]
    assert rest.namespace(nested)["namespace"] == [top, "b"]
    assert rest.namespace(top)["properties"].get("purpose") == "e2e"
    spark.sql(f"ALTER NAMESPACE cat.{top} SET DBPROPERTIES ('purpose' = 'changed', 'team' = 'x')")
    assert {"purpose": "changed", "team": "x"}.items() <= rest.namespace(top)["properties"].items()
    described = dict(rows(spark, f"DESCRIBE NAMESPACE EXTENDED cat.{top}"))
    assert "changed" in described["Properties"]

    table = f"cat.{nested}.events"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP, data STRING) USING iceberg "
        "PARTITIONED BY (days(ts), bucket(4, id))"
    )
    spark.sql(
        f"INSERT INTO {table} VALUES "
        "(1, TIMESTAMP '2024-01-01 10:00:00', 'a'), (2, TIMESTAMP '2024-01-02 10:00:00', 'b'), "
        "(3, TIMESTAMP '2024-01-02 11:00:00', 'c'), (4, TIMESTAMP '2024-01-03 00:00:00', 'd')"
    )

    assert rows(spark, f"SELECT id, data FROM {table} ORDER BY id") == [
        (1, "a"), (2, "b"), (3, "c"), (4, "d"),
    ]  # fmt: skip
    day_two = f"SELECT id FROM {table} WHERE ts >= '2024-01-02' AND ts < '2024-01-03' ORDER BY id"
    assert rows(spark, day_two) == [(2,), (3,)]
    assert rows(spark, f"SHOW TABLES IN cat.{nested}") == [(nested, "events", False)]

    # Each data file sits in the partition its rows transform to.
    file_partitions = set(rows(spark, f"SELECT partition.ts_day, partition.id_bucket FROM {table}.files"))
    row_partitions = set(
        rows(spark, f"SELECT DISTINCT CAST(ts AS DATE), cat.system.bucket(4, id) FROM {table}")
    )
    assert file_partitions == row_partitions
    assert len({day for day, _ in file_partitions}) == 3

    # The gateway stored the spec with source ids of the stored schema.
    metadata = rest.table(nested, "events")
    ids = field_ids(current_schema(metadata))
    assert sorted(ids) == ["data", "id", "ts"]
    spec = default_spec(metadata)
    assert [(f["source-id"], f["transform"]) for f in spec["fields"]] == [
        (ids["ts"], "day"),
        (ids["id"], "bucket[4]"),
    ]
    assert metadata["current-snapshot-id"] == snapshots(spark, table)[-1][0]

    with pytest.raises(Exception, match=r"(?i)not empty|NOT_EMPTY") as excinfo:
        spark.sql(f"DROP NAMESPACE cat.{nested}")
    print(exception_text(excinfo))
    spark.sql(f"DROP TABLE {table}")
    spark.sql(f"DROP NAMESPACE cat.{nested}")
    spark.sql(f"DROP NAMESPACE cat.{top}")
    assert top not in {r[0] for r in rows(spark, "SHOW NAMESPACES IN cat")}
    assert rest.get(f"namespaces/{rest.ns_path(top)}").status_code == 404


# -- row-level operations --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_update_delete_merge(spark: SparkSession, rest: Rest, mode: str) -> None:
    ns = new_namespace(spark, "dml")
    table = f"cat.{ns}.t"
    spark.sql(
        f"CREATE TABLE {table} (id INT, category STRING, amount INT) USING iceberg "
        "PARTITIONED BY (category) TBLPROPERTIES ('format-version' = '2', "
        f"'write.delete.mode' = '{mode}', 'write.update.mode' = '{mode}', 'write.merge.mode' = '{mode}')"
    )
    spark.sql(
        f"INSERT INTO {table} VALUES (1, 'a', 10), (2, 'a', 20), (3, 'b', 30), (4, 'b', 40), (5, 'c', 50)"
    )

    spark.sql(f"UPDATE {table} SET amount = amount + 1 WHERE category = 'a'")
    assert rows(spark, f"SELECT id, amount FROM {table} WHERE category = 'a' ORDER BY id") == [
        (1, 11),
        (2, 21),
    ]

    spark.sql(f"DELETE FROM {table} WHERE id = 3")
    assert rows(spark, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,), (4,), (5,)]

    spark.sql(
        f"MERGE INTO {table} t USING (SELECT * FROM VALUES "
        "(2, 'a', 200, 'u'), (4, 'b', 0, 'd'), (6, 'c', 60, 'i') AS s(id, category, amount, op)) s "
        "ON t.id = s.id "
        "WHEN MATCHED AND s.op = 'd' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.amount = s.amount "
        "WHEN NOT MATCHED THEN INSERT (id, category, amount) VALUES (s.id, s.category, s.amount)"
    )
    assert rows(spark, f"SELECT * FROM {table} ORDER BY id") == [
        (1, "a", 11), (2, "a", 200), (5, "c", 50), (6, "c", 60),
    ]  # fmt: skip

    delete_files = rows(spark, f"SELECT count(*) FROM {table}.files WHERE content <> 0")[0][0]
    if mode == "merge-on-read":
        assert delete_files > 0
    else:
        assert delete_files == 0

    history = snapshots(spark, table)
    assert len(history) == 4
    assert history[0][2] == "append"
    metadata = rest.table(ns, "t")
    assert metadata["format-version"] == 2
    assert metadata["current-snapshot-id"] == history[-1][0]
    assert metadata["last-sequence-number"] == 4
    assert sorted(s["snapshot-id"] for s in metadata["snapshots"]) == sorted(s[0] for s in history)
    assert metadata["properties"]["write.merge.mode"] == mode
    summary = next(s for s in metadata["snapshots"] if s["snapshot-id"] == history[-1][0])["summary"]
    assert int(summary["total-records"]) - int(summary["total-position-deletes"]) == 4


# -- schema and partition evolution --------------------------------------------------------------


def test_schema_and_partition_evolution(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "evolve")
    table = f"cat.{ns}.people"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'ann'), (2, 'bob')")
    before = field_ids(current_schema(rest.table(ns, "people")))

    spark.sql(f"ALTER TABLE {table} ADD COLUMN region STRING COMMENT 'sales region'")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN name TO full_name")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD region")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('owner.team' = 'e2e')")
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY id DESC NULLS LAST")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'cy', 'eu'), (4, 'di', 'us'), (5, 'ed', 'eu')")

    assert spark.table(table).columns == ["id", "full_name", "region"]
    assert rows(spark, f"SELECT * FROM {table} ORDER BY id") == [
        (1, "ann", None), (2, "bob", None), (3, "cy", "eu"), (4, "di", "us"), (5, "ed", "eu"),
    ]  # fmt: skip
    assert rows(spark, f"SELECT id FROM {table} WHERE region = 'eu' ORDER BY id") == [(3,), (5,)]
    assert rows(spark, f"SELECT DISTINCT spec_id FROM {table}.files ORDER BY spec_id") == [(0,), (1,)]
    assert set(rows(spark, f"SELECT partition.region FROM {table}.files WHERE spec_id = 1")) == {
        ("eu",),
        ("us",),
    }

    metadata = rest.table(ns, "people")
    schema = current_schema(metadata)
    after = field_ids(schema)
    assert list(after) == ["id", "full_name", "region"]
    assert after["id"] == before["id"]
    assert after["full_name"] == before["name"]  # a rename keeps the field id
    assert after["region"] not in before.values()
    region = next(f for f in schema["fields"] if f["name"] == "region")
    assert region["doc"] == "sales region"
    assert region["required"] is False
    assert len(metadata["partition-specs"]) == 2
    spec = default_spec(metadata)
    assert spec["spec-id"] == 1
    assert [(f["source-id"], f["transform"]) for f in spec["fields"]] == [(after["region"], "identity")]
    assert metadata["properties"]["owner.team"] == "e2e"
    order = next(o for o in metadata["sort-orders"] if o["order-id"] == metadata["default-sort-order-id"])
    assert [(f["source-id"], f["transform"], f["direction"], f["null-order"]) for f in order["fields"]] == [
        (after["id"], "identity", "desc", "nulls-last"),
    ]


def test_typed_and_nested_columns(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "types")
    table = f"cat.{ns}.t"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT NOT NULL, price DECIMAL(10, 2), day DATE, at TIMESTAMP, "
        "local_at TIMESTAMP_NTZ, payload BINARY, flag BOOLEAN, ratio DOUBLE, tags ARRAY<STRING>, "
        "attrs MAP<STRING, INT>, point STRUCT<x: DOUBLE, y: DOUBLE>) USING iceberg"
    )
    spark.sql(
        f"INSERT INTO {table} VALUES (1, 12.34, DATE '2024-02-29', TIMESTAMP '2024-01-01 01:02:03.456', "
        "TIMESTAMP_NTZ '2024-01-01 12:00:00', X'CAFE', true, 0.5, array('a', 'b'), map('k', 1), "
        "named_struct('x', 1.0D, 'y', 2.0D)), "
        "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    rendered = (
        "SELECT id, CAST(price AS STRING), CAST(day AS STRING), CAST(at AS STRING), "
        "CAST(local_at AS STRING), hex(payload), flag, ratio, tags, attrs, point.x, point.y "
        f"FROM {table} ORDER BY id"
    )
    assert rows(spark, rendered) == [
        (1, "12.34", "2024-02-29", "2024-01-01 01:02:03.456", "2024-01-01 12:00:00", "CAFE", True, 0.5,
         ["a", "b"], {"k": 1}, 1.0, 2.0),
        (2, None, None, None, None, None, None, None, None, None, None, None),
    ]  # fmt: skip

    metadata = rest.table(ns, "t")
    schema = current_schema(metadata)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert {k: v for k, v in types.items() if isinstance(v, str)} == {
        "id": "long", "price": "decimal(10, 2)", "day": "date", "at": "timestamptz",
        "local_at": "timestamp", "payload": "binary", "flag": "boolean", "ratio": "double",
    }  # fmt: skip
    assert types["tags"]["type"] == "list"
    assert types["tags"]["element"] == "string"
    assert (types["attrs"]["type"], types["attrs"]["key"], types["attrs"]["value"]) == (
        "map",
        "string",
        "int",
    )
    assert [f["name"] for f in types["point"]["fields"]] == ["x", "y"]
    assert next(f for f in schema["fields"] if f["name"] == "id")["required"] is True
    ids = all_field_ids(schema)
    assert len(ids) == len(set(ids)) == 16  # 11 columns, list element, map key and value, 2 struct fields
    assert max(ids) == metadata["last-column-id"]

    # Nested evolution and identifier fields.
    spark.sql(f"ALTER TABLE {table} ADD COLUMN point.z DOUBLE")
    spark.sql(f"ALTER TABLE {table} SET IDENTIFIER FIELDS id")
    spark.sql(
        f"INSERT INTO {table} VALUES (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "named_struct('x', 3.0D, 'y', 4.0D, 'z', 5.0D))"
    )
    assert rows(spark, f"SELECT id, point.x, point.z FROM {table} WHERE point IS NOT NULL ORDER BY id") == [
        (1, 1.0, None),
        (3, 3.0, 5.0),
    ]
    evolved = rest.table(ns, "t")
    new_schema = current_schema(evolved)
    point = next(f for f in new_schema["fields"] if f["name"] == "point")
    z = next(f for f in point["type"]["fields"] if f["name"] == "z")
    assert z["id"] == evolved["last-column-id"] == max(ids) + 1
    assert new_schema["identifier-field-ids"] == [field_ids(new_schema)["id"]]


def test_dataframe_writes_and_insert_overwrite(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "writer")
    table = f"cat.{ns}.t"
    df = spark.createDataFrame([(1, "a"), (2, "a"), (3, "b")], "id INT, p STRING")
    df.writeTo(table).using("iceberg").partitionedBy("p").tableProperty("made-by", "writeTo").create()
    spark.createDataFrame([(4, "c")], "id INT, p STRING").writeTo(table).append()
    assert rows(spark, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,), (3,), (4,)]

    # Dynamic overwrite replaces only the partitions the new rows fall in.
    spark.createDataFrame([(10, "a")], "id INT, p STRING").writeTo(table).overwritePartitions()
    assert rows(spark, f"SELECT id, p FROM {table} ORDER BY id") == [(3, "b"), (4, "c"), (10, "a")]

    spark.sql(f"INSERT OVERWRITE {table} PARTITION (p = 'b') VALUES (20)")
    assert rows(spark, f"SELECT id, p FROM {table} ORDER BY id") == [(4, "c"), (10, "a"), (20, "b")]

    history = snapshots(spark, table)
    assert [s[2] for s in history] == ["append", "append", "overwrite", "overwrite"]
    metadata = rest.table(ns, "t")
    assert metadata["properties"]["made-by"] == "writeTo"
    assert [f["transform"] for f in default_spec(metadata)["fields"]] == ["identity"]
    assert metadata["current-snapshot-id"] == history[-1][0]
    summary = next(s for s in metadata["snapshots"] if s["snapshot-id"] == history[-1][0])["summary"]
    assert summary["total-records"] == "3"


# -- CTAS / RTAS --------------------------------------------------------------------------------


def test_create_and_replace_table_as_select(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "ctas")
    src = f"cat.{ns}.src"
    spark.sql(f"CREATE TABLE {src} (id BIGINT, data STRING) USING iceberg")
    spark.sql(f"INSERT INTO {src} VALUES (1, 'x'), (2, 'y'), (3, 'z')")

    target = f"cat.{ns}.c"
    spark.sql(
        f"CREATE TABLE {target} USING iceberg PARTITIONED BY (bucket(2, id)) "
        f"TBLPROPERTIES ('created-by' = 'ctas') AS SELECT id, upper(data) AS up FROM {src} WHERE id < 3"
    )
    assert rows(spark, f"SELECT * FROM {target} ORDER BY id") == [(1, "X"), (2, "Y")]
    created = rest.table(ns, "c")
    assert list(field_ids(current_schema(created))) == ["id", "up"]
    assert [f["transform"] for f in default_spec(created)["fields"]] == ["bucket[2]"]
    assert created["properties"]["created-by"] == "ctas"
    ctas_snapshots = snapshots(spark, target)
    assert [(s[0], s[2]) for s in ctas_snapshots] == [(created["current-snapshot-id"], "append")]

    with pytest.raises(Exception, match=r"(?i)already exists") as excinfo:
        spark.sql(f"CREATE TABLE {target} USING iceberg AS SELECT 1 AS one")
    print(exception_text(excinfo))
    spark.sql(f"CREATE TABLE IF NOT EXISTS {target} USING iceberg AS SELECT 1 AS one")
    assert rows(spark, f"SELECT count(*) FROM {target}") == [(2,)]

    # A CTAS whose query fails leaves no table behind (the staged create is never committed).
    with pytest.raises(Exception, match="boom"):
        spark.sql(
            f"CREATE TABLE cat.{ns}.failed USING iceberg AS SELECT id, "
            f"CASE WHEN id > 1 THEN CAST(raise_error('boom') AS STRING) ELSE data END AS d FROM {src}"
        )
    assert rest.table_status(ns, "failed") == 404
    assert {r[1] for r in rows(spark, f"SHOW TABLES IN cat.{ns}")} == {"src", "c"}

    spark.sql(
        f"REPLACE TABLE {target} USING iceberg AS SELECT id * 10 AS big, data, id % 2 = 0 AS even FROM {src}"
    )
    assert spark.table(target).columns == ["big", "data", "even"]
    assert rows(spark, f"SELECT * FROM {target} ORDER BY big") == [
        (10, "x", False), (20, "y", True), (30, "z", False),
    ]  # fmt: skip
    replaced = rest.table(ns, "c")
    assert replaced["table-uuid"] == created["table-uuid"]
    assert list(field_ids(current_schema(replaced))) == ["big", "data", "even"]
    assert default_spec(replaced)["fields"] == []
    assert replaced["properties"].get("created-by") == "ctas"  # REPLACE keeps unset properties
    # The history survives a replace: the CTAS snapshot is still readable, with its own schema.
    old_id = ctas_snapshots[0][0]
    assert {s["snapshot-id"] for s in replaced["snapshots"]} >= {old_id, replaced["current-snapshot-id"]}
    old = spark.sql(f"SELECT * FROM {target} VERSION AS OF {old_id}")
    assert old.columns == ["id", "up"]
    assert sorted(tuple(r) for r in old.collect()) == [(1, "X"), (2, "Y")]

    fresh = f"cat.{ns}.fresh"
    spark.sql(f"CREATE OR REPLACE TABLE {fresh} USING iceberg AS SELECT data FROM {src} WHERE id = 3")
    assert rows(spark, f"SELECT * FROM {fresh}") == [("z",)]
    assert rest.table_status(ns, "fresh") == 200


# -- time travel ---------------------------------------------------------------------------------


def test_time_travel_and_rollback(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "travel")
    table = f"cat.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (id INT, v STRING) USING iceberg")
    for i in range(1, 4):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'v{i}')")

    history = snapshots(spark, table)
    assert len(history) == 3
    (s1, t1, _), (s2, t2, _), (s3, _, _) = history
    metadata = rest.table(ns, "t")
    assert metadata["current-snapshot-id"] == s3
    assert [e["snapshot-id"] for e in metadata["snapshot-log"]] == [s1, s2, s3]
    log = f"SELECT snapshot_id, is_current_ancestor FROM {table}.history ORDER BY made_current_at"
    assert rows(spark, log) == [
        (s1, True), (s2, True), (s3, True),
    ]  # fmt: skip

    assert rows(spark, f"SELECT id FROM {table} VERSION AS OF {s1}") == [(1,)]
    assert rows(spark, f"SELECT id FROM {table} VERSION AS OF {s2} ORDER BY id") == [(1,), (2,)]
    assert rows(spark, f"SELECT count(*) FROM {table} FOR SYSTEM_VERSION AS OF {s3}") == [(3,)]
    assert rows(spark, f"SELECT id FROM {table} TIMESTAMP AS OF '{t2}' ORDER BY id") == [(1,), (2,)]
    just_before_t2 = rows(spark, f"SELECT CAST(TIMESTAMP '{t2}' - INTERVAL 1 MILLISECOND AS STRING)")[0][0]
    assert rows(spark, f"SELECT id FROM {table} TIMESTAMP AS OF '{just_before_t2}'") == [(1,)]
    assert rows(spark, f"SELECT id FROM {table} TIMESTAMP AS OF '{t1}'") == [(1,)]
    with pytest.raises(Exception, match=r"Cannot find a snapshot older than"):
        spark.sql(f"SELECT * FROM {table} TIMESTAMP AS OF '2000-01-01 00:00:00'").collect()
    with pytest.raises(Exception, match=r"Cannot find snapshot with ID 12345"):
        spark.sql(f"SELECT * FROM {table} VERSION AS OF 12345").collect()

    result = rows(spark, f"CALL cat.system.rollback_to_snapshot('{ns}.t', {s1})")
    assert result == [(s3, s1)]
    assert rows(spark, f"SELECT id FROM {table}") == [(1,)]
    rolled = rest.table(ns, "t")
    assert rolled["current-snapshot-id"] == s1
    assert rolled["refs"]["main"]["snapshot-id"] == s1
    assert {s["snapshot-id"] for s in rolled["snapshots"]} == {s1, s2, s3}
    assert rows(spark, f"SELECT count(*) FROM {table} VERSION AS OF {s3}") == [(3,)]


# -- views ---------------------------------------------------------------------------------------


def test_views(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "views")
    other = new_namespace(spark, "views2")
    table = f"cat.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (id INT, data STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')")

    spark.sql(
        f"CREATE VIEW cat.{ns}.v (id COMMENT 'the id', up) COMMENT 'upper-cased' "
        f"AS SELECT id, upper(data) FROM {table} WHERE id > 1"
    )
    assert rows(spark, f"SELECT * FROM cat.{ns}.v ORDER BY id") == [(2, "B"), (3, "C")]
    assert rows(spark, f"SHOW VIEWS IN cat.{ns}") == [(ns, "v", False)]
    assert {r[1] for r in rows(spark, f"SHOW TABLES IN cat.{ns}")} == {"t"}

    view = rest.view(ns, "v")
    version = next(v for v in view["versions"] if v["version-id"] == view["current-version-id"])
    spark_sql = [r for r in version["representations"] if r["dialect"] == "spark"]
    assert len(spark_sql) == 1
    assert "upper(data)" in spark_sql[0]["sql"]
    schema = next(s for s in view["schemas"] if s["schema-id"] == version["schema-id"])
    assert [(f["name"], f.get("doc")) for f in schema["fields"]] == [("id", "the id"), ("up", None)]
    assert view["properties"].get("comment") == "upper-cased"

    # A view is not materialised: it sees new rows.
    spark.sql(f"INSERT INTO {table} VALUES (4, 'd')")
    assert rows(spark, f"SELECT count(*) FROM cat.{ns}.v") == [(3,)]

    # Views and tables share one name space.
    with pytest.raises(Exception, match=r"(?i)already exists") as excinfo:
        spark.sql(f"CREATE VIEW cat.{ns}.t AS SELECT 1 AS one")
    print(exception_text(excinfo))
    with pytest.raises(Exception, match=r"(?i)already exists") as excinfo:
        spark.sql(f"CREATE TABLE cat.{ns}.v (x INT) USING iceberg")
    print(exception_text(excinfo))
    assert rest.view_status(ns, "v") == 200

    spark.sql(f"CREATE OR REPLACE VIEW cat.{ns}.v AS SELECT id * 100 AS hundred FROM {table} WHERE id = 1")
    assert rows(spark, f"SELECT * FROM cat.{ns}.v") == [(100,)]
    replaced = rest.view(ns, "v")
    assert replaced["view-uuid"] == view["view-uuid"]
    assert replaced["current-version-id"] != view["current-version-id"]
    assert len(replaced["version-log"]) == 2

    spark.sql(f"ALTER VIEW cat.{ns}.v RENAME TO cat.{other}.w")
    assert rows(spark, f"SHOW VIEWS IN cat.{ns}") == []
    assert rows(spark, f"SHOW VIEWS IN cat.{other}") == [(other, "w", False)]
    assert rest.view_status(ns, "v") == 404
    assert rows(spark, f"SELECT * FROM cat.{other}.w") == [(100,)]

    spark.sql(f"DROP VIEW cat.{other}.w")
    assert rows(spark, f"SHOW VIEWS IN cat.{other}") == []
    assert rest.view_status(other, "w") == 404
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM cat.{other}.w")
    assert rows(spark, f"SELECT count(*) FROM {table}") == [(4,)]  # the table is untouched


# -- rename, drop ----------------------------------------------------------------------------------


def test_rename_table_across_namespaces(spark: SparkSession, rest: Rest) -> None:
    ns1 = new_namespace(spark, "ren1")
    ns2 = new_namespace(spark, "ren2")
    spark.sql(f"CREATE TABLE cat.{ns1}.t (id INT) USING iceberg")
    spark.sql(f"INSERT INTO cat.{ns1}.t VALUES (1), (2)")
    spark.sql(f"CREATE TABLE cat.{ns2}.taken (id INT) USING iceberg")
    uuid_before = rest.table(ns1, "t")["table-uuid"]

    with pytest.raises(Exception, match=r"(?i)already exists") as excinfo:
        spark.sql(f"ALTER TABLE cat.{ns1}.t RENAME TO {ns2}.taken")
    print(exception_text(excinfo))
    with pytest.raises(Exception, match=r"(?i)namespace|not found|does not exist") as excinfo:
        spark.sql(f"ALTER TABLE cat.{ns1}.t RENAME TO {unique('missing')}.t")
    print(exception_text(excinfo))
    assert rest.table_status(ns1, "t") == 200

    # Spark 3.5 hands the new name to the catalog as it is written: it names no catalog.
    spark.sql(f"ALTER TABLE cat.{ns1}.t RENAME TO {ns2}.t2")
    assert rows(spark, f"SHOW TABLES IN cat.{ns1}") == []
    assert {r[1] for r in rows(spark, f"SHOW TABLES IN cat.{ns2}")} == {"taken", "t2"}
    assert rest.table_status(ns1, "t") == 404
    assert rest.table(ns2, "t2")["table-uuid"] == uuid_before
    assert rows(spark, f"SELECT id FROM cat.{ns2}.t2 ORDER BY id") == [(1,), (2,)]
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM cat.{ns1}.t")

    spark.sql(f"INSERT INTO cat.{ns2}.t2 VALUES (3)")
    assert rows(spark, f"SELECT id FROM cat.{ns2}.t2 ORDER BY id") == [(1,), (2,), (3,)]
    assert len(rest.table(ns2, "t2")["snapshots"]) == 2


def test_drop_table_purge_deletes_files(
    spark: SparkSession, rest: Rest, session_gateway: GatewayProcess
) -> None:
    ns = new_namespace(spark, "purge")
    for name in ("doomed", "kept"):
        spark.sql(f"CREATE TABLE cat.{ns}.{name} (id INT, day DATE) USING iceberg PARTITIONED BY (day)")
        spark.sql(f"INSERT INTO cat.{ns}.{name} VALUES (1, DATE '2024-01-01'), (2, DATE '2024-01-02')")
        spark.sql(f"INSERT INTO cat.{ns}.{name} VALUES (3, DATE '2024-01-03')")

    warehouse = session_gateway.warehouse_dir.resolve()
    doomed_dir = local_path(rest.table(ns, "doomed")["location"]).resolve()
    kept_dir = local_path(rest.table(ns, "kept")["location"]).resolve()
    assert doomed_dir.is_relative_to(warehouse), (doomed_dir, warehouse)
    assert doomed_dir != kept_dir
    doomed_files = files_under(doomed_dir)
    kept_files = files_under(kept_dir)
    assert len([p for p in doomed_files if p.suffix == ".parquet"]) == 3
    assert any(p.name.endswith(".metadata.json") for p in doomed_files)

    spark.sql(f"DROP TABLE cat.{ns}.doomed PURGE")

    assert {r[1] for r in rows(spark, f"SHOW TABLES IN cat.{ns}")} == {"kept"}
    assert rest.table_status(ns, "doomed") == 404
    deadline = time.monotonic() + 15  # the gateway may purge in the background
    while files_under(doomed_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files_under(doomed_dir) == set()
    assert files_under(kept_dir) == kept_files
    assert rows(spark, f"SELECT count(*) FROM cat.{ns}.kept") == [(3,)]


def test_drop_without_purge_then_register(spark: SparkSession, session_gateway: GatewayProcess) -> None:
    """In an unsealed warehouse, engines own their files: a drop leaves them for registerTable."""
    rest = Rest(session_gateway, "plain")
    ns = unique("register")
    spark.sql(f"CREATE NAMESPACE plain.{ns}")
    table = f"plain.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2), (3)")
    before = rest.table(ns, "t")
    location = local_path(before["location"])
    table_files = files_under(location)

    spark.sql(f"DROP TABLE {table}")
    assert rest.table_status(ns, "t") == 404
    assert files_under(location) == table_files  # no PURGE: data and metadata stay

    registered = spark.sql(
        f"CALL plain.system.register_table(table => '{ns}.revived', "
        f"metadata_file => '{before['metadata-location']}')"
    ).collect()[0]
    assert registered["current_snapshot_id"] == before["current-snapshot-id"]
    assert registered["total_records_count"] == 3
    revived = rest.table(ns, "revived")
    assert revived["table-uuid"] == before["table-uuid"]
    assert rows(spark, f"SELECT id FROM plain.{ns}.revived ORDER BY id") == [(1,), (2,), (3,)]
    spark.sql(f"INSERT INTO plain.{ns}.revived VALUES (4)")
    assert rows(spark, f"SELECT count(*) FROM plain.{ns}.revived") == [(4,)]


def test_concurrent_appends_all_land(spark: SparkSession, rest: Rest) -> None:
    """Writers racing on one table: every commit lands, on one linear history."""
    ns = new_namespace(spark, "race")
    table = f"cat.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (writer INT, n INT) USING iceberg")

    def write(writer: int) -> None:
        for n in range(2):
            spark.sql(f"INSERT INTO {table} VALUES ({writer}, {n})")

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(write, range(3)))

    assert sorted(rows(spark, f"SELECT * FROM {table}")) == [(w, n) for w in range(3) for n in range(2)]
    metadata = rest.table(ns, "t")
    log = [e["snapshot-id"] for e in metadata["snapshot-log"]]
    assert len(log) == len(set(log)) == 6
    assert log[-1] == metadata["current-snapshot-id"]
    parents = {s["snapshot-id"]: s.get("parent-snapshot-id") for s in metadata["snapshots"]}
    assert [parents[snapshot] for snapshot in log] == [None, *log[:-1]]
    sequence = {s["snapshot-id"]: s["sequence-number"] for s in metadata["snapshots"]}
    assert [sequence[snapshot] for snapshot in log] == [1, 2, 3, 4, 5, 6]


# -- procedures ----------------------------------------------------------------------------------


def test_rewrite_data_files_then_expire_snapshots(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "maint")
    table = f"cat.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (id INT, v STRING) USING iceberg")
    for i in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'v{i}')")
    location = local_path(rest.table(ns, "t")["location"])
    original_data = {p for p in files_under(location) if p.suffix == ".parquet"}
    assert len(original_data) == 3

    stats = rows(spark, f"CALL cat.system.compute_table_stats(table => '{ns}.t')")
    assert len(stats) == 1
    stats_file = local_path(stats[0][0])
    assert stats_file.exists()
    with_stats = rest.table(ns, "t")
    assert [s["snapshot-id"] for s in with_stats["statistics"]] == [with_stats["current-snapshot-id"]]

    rewritten = spark.sql(
        f"CALL cat.system.rewrite_data_files(table => '{ns}.t', options => map('min-input-files', '2'))"
    ).collect()[0]
    assert rewritten["rewritten_data_files_count"] == 3
    assert rewritten["added_data_files_count"] == 1
    assert rewritten["failed_data_files_count"] == 0
    assert rows(spark, f"SELECT count(*) FROM {table}.files") == [(1,)]
    assert [s[2] for s in snapshots(spark, table)] == ["append", "append", "append", "replace"]
    assert rows(spark, f"SELECT * FROM {table} ORDER BY id") == [(0, "v0"), (1, "v1"), (2, "v2")]
    current = rest.table(ns, "t")["current-snapshot-id"]

    expired = spark.sql(
        f"CALL cat.system.expire_snapshots(table => '{ns}.t', older_than => {FAR_FUTURE}, retain_last => 1)"
    ).collect()[0]
    assert expired["deleted_data_files_count"] == 3
    assert expired["deleted_manifest_lists_count"] == 3
    assert expired["deleted_statistics_files_count"] == 1

    assert [s[0] for s in snapshots(spark, table)] == [current]
    metadata = rest.table(ns, "t")
    assert [s["snapshot-id"] for s in metadata["snapshots"]] == [current]
    assert metadata["current-snapshot-id"] == current
    assert metadata.get("statistics", []) == []
    assert rows(spark, f"SELECT * FROM {table} ORDER BY id") == [(0, "v0"), (1, "v1"), (2, "v2")]
    remaining = files_under(location)
    assert not original_data & remaining
    assert len([p for p in remaining if p.suffix == ".parquet"]) == 1
    assert len([p for p in remaining if p.name.startswith("snap-")]) == 1
    assert not stats_file.exists()


def test_remove_orphan_files(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "orphans")
    table = f"cat.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
    spark.sql(f"INSERT INTO {table} VALUES (3)")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('k' = 'v')")
    location = local_path(rest.table(ns, "t")["location"])
    table_files = files_under(location)
    orphans = {location / "data" / "orphan-1.parquet", location / "metadata" / "orphan-2.avro"}
    for orphan in orphans:
        orphan.write_bytes(b"not referenced by the table")
    # Everything looks ten days old, so the default older_than (three days ago) covers it all:
    # only files the table's metadata does not reach may be reported.
    ten_days_ago = time.time() - 10 * 86400
    for path in files_under(location):
        os.utime(path, (ten_days_ago, ten_days_ago))

    with pytest.raises(Exception, match="interval less than 24 hours"):
        spark.sql(f"CALL cat.system.remove_orphan_files(table => '{ns}.t', older_than => {FAR_FUTURE})")

    dry = rows(spark, f"CALL cat.system.remove_orphan_files(table => '{ns}.t', dry_run => true)")
    assert {local_path(r[0]) for r in dry} == orphans
    assert all(p.exists() for p in orphans)

    removed = rows(spark, f"CALL cat.system.remove_orphan_files(table => '{ns}.t')")
    assert {local_path(r[0]) for r in removed} == orphans
    assert files_under(location) == table_files
    assert rows(spark, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,), (3,)]


# -- branches and tags ---------------------------------------------------------------------------


def test_branches_and_tags(spark: SparkSession, rest: Rest) -> None:
    ns = new_namespace(spark, "refs")
    table = f"cat.{ns}.t"
    spark.sql(f"CREATE TABLE {table} (id INT) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
    base = rest.table(ns, "t")["current-snapshot-id"]

    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    spark.sql(f"ALTER TABLE {table} CREATE TAG v1 RETAIN 7 DAYS")
    spark.sql(f"INSERT INTO {table}.branch_audit VALUES (3)")

    assert rows(spark, f"SELECT count(*) FROM {table}") == [(2,)]
    assert rows(spark, f"SELECT id FROM {table} VERSION AS OF 'audit' ORDER BY id") == [(1,), (2,), (3,)]
    assert rows(spark, f"SELECT count(*) FROM {table}.branch_audit") == [(3,)]
    assert rows(spark, f"SELECT count(*) FROM {table} VERSION AS OF 'v1'") == [(2,)]

    metadata = rest.table(ns, "t")
    refs = metadata["refs"]
    assert (refs["main"]["type"], refs["main"]["snapshot-id"]) == ("branch", base)
    assert refs["v1"]["type"] == "tag"
    assert refs["v1"]["snapshot-id"] == base
    assert refs["v1"]["max-ref-age-ms"] == 7 * 86400 * 1000
    assert refs["audit"]["type"] == "branch"
    audit_head = refs["audit"]["snapshot-id"]
    assert audit_head != base
    assert metadata["current-snapshot-id"] == base
    assert set(rows(spark, f"SELECT name, type, snapshot_id FROM {table}.refs")) == {
        ("main", "BRANCH", base),
        ("audit", "BRANCH", audit_head),
        ("v1", "TAG", base),
    }

    assert rows(spark, f"CALL cat.system.fast_forward('{ns}.t', 'main', 'audit')") == [
        ("main", base, audit_head)
    ]
    assert rows(spark, f"SELECT count(*) FROM {table}") == [(3,)]
    assert rows(spark, f"SELECT count(*) FROM {table} VERSION AS OF 'v1'") == [(2,)]

    spark.sql(f"ALTER TABLE {table} DROP BRANCH audit")
    spark.sql(f"ALTER TABLE {table} DROP TAG v1")
    refs = rest.table(ns, "t")["refs"]
    assert set(refs) == {"main"}
    assert refs["main"]["snapshot-id"] == audit_head
    with pytest.raises(Exception, match="audit"):
        spark.sql(f"SELECT * FROM {table} VERSION AS OF 'audit'").collect()
