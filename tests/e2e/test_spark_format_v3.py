"""Format version 3 tables through Spark: create, upgrade from v2, row lineage kept by the catalog."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
import requests

from tests.support.gateway import GatewayProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _metadata(gateway: GatewayProcess, namespace: str, table: str) -> dict[str, object]:
    answer = requests.get(f"{gateway.url}/v1/namespaces/{namespace}/tables/{table}", timeout=15)
    answer.raise_for_status()
    return dict(answer.json()["metadata"])


def test_v3_table_row_lineage_and_upgrade(spark: SparkSession, session_gateway: GatewayProcess) -> None:
    ns = f"sp_v3_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE cat.{ns}")
    spark.sql(
        f"CREATE TABLE cat.{ns}.t (id bigint, s string) USING iceberg TBLPROPERTIES ('format-version'='3')"
    )
    spark.sql(f"INSERT INTO cat.{ns}.t VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO cat.{ns}.t VALUES (3, 'c')")
    spark.sql(f"DELETE FROM cat.{ns}.t WHERE id = 1")
    assert [tuple(r) for r in spark.sql(f"SELECT * FROM cat.{ns}.t ORDER BY id").collect()] == [
        (2, "b"),
        (3, "c"),
    ]

    meta = _metadata(session_gateway, ns, "t")
    assert meta["format-version"] == 3
    first_row_ids = [snap["first-row-id"] for snap in meta["snapshots"]]  # type: ignore[attr-defined]
    assert first_row_ids[:2] == [0, 2]
    assert meta["next-row-id"] >= 3  # type: ignore[operator]

    spark.sql(f"CREATE TABLE cat.{ns}.u (id bigint) USING iceberg TBLPROPERTIES ('format-version'='2')")
    spark.sql(f"INSERT INTO cat.{ns}.u VALUES (1)")
    spark.sql(f"ALTER TABLE cat.{ns}.u SET TBLPROPERTIES ('format-version'='3')")
    upgraded = _metadata(session_gateway, ns, "u")
    assert upgraded["format-version"] == 3
    assert upgraded["next-row-id"] == 0
    spark.sql(f"INSERT INTO cat.{ns}.u VALUES (2)")
    assert [r.id for r in spark.sql(f"SELECT id FROM cat.{ns}.u ORDER BY id").collect()] == [1, 2]
    # The first v3 snapshot assigns row ids to the pre-upgrade row as well: 1 old + 1 new.
    assert _metadata(session_gateway, ns, "u")["next-row-id"] == 2
