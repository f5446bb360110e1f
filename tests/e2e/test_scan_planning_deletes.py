"""Server-side planning of tables with position deletes written by a real engine (Spark 3.5 with
Iceberg 1.10, merge-on-read): the server must attach exactly the delete files pyiceberg's own
planner attaches, list each delete file once per response, and reading through server-side
planning must give the rows Spark sees."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

import pytest
import requests
from pyiceberg.catalog.rest.scan_planning import PlanCompleted
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo, GreaterThan

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

HTTP_TIMEOUT = 30


def _tasks(table: object, row_filter: BooleanExpression) -> dict[str, set[str]]:
    """Data file -> its delete files, as planned for `table` (a pyiceberg Table)."""
    scan = table.scan(row_filter=row_filter)  # type: ignore[attr-defined]
    return {task.file.file_path: {d.file_path for d in task.delete_files} for task in scan.plan_files()}


def test_position_deletes_are_planned_like_pyiceberg_plans_them(
    spark: SparkSession, session_gateway: GatewayProcess
) -> None:
    ns = f"sp_plandel_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE cat.{ns}")
    table = f"cat.{ns}.t"
    spark.sql(
        f"CREATE TABLE {table} (id INT, category STRING) USING iceberg PARTITIONED BY (category) "
        "TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read', "
        "'write.delete.granularity' = 'partition')"
    )
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'a'), (3, 'b'), (4, 'c')")
    spark.sql(f"INSERT INTO {table} VALUES (5, 'a'), (6, 'a'), (7, 'b')")
    # One partition-scoped delete file for 'a' that applies to both of its data files.
    spark.sql(f"DELETE FROM {table} WHERE id IN (2, 5)")
    spark.sql(f"DELETE FROM {table} WHERE id = 7")
    expected = sorted(row[0] for row in spark.sql(f"SELECT id FROM {table}").collect())
    assert expected == [1, 3, 4, 6]

    server = make_catalog(session_gateway, **{"scan-planning-mode": "server"}).load_table(f"{ns}.t")
    local = make_catalog(session_gateway).load_table(f"{ns}.t")
    for row_filter in (AlwaysTrue(), EqualTo("category", "a"), GreaterThan("id", 4)):
        planned = _tasks(server, row_filter)
        assert planned == _tasks(local, row_filter), row_filter
        ids = sorted(server.scan(row_filter=row_filter).to_arrow().column("id").to_pylist())
        assert ids == sorted(local.scan(row_filter=row_filter).to_arrow().column("id").to_pylist())
    assert sorted(server.scan().to_arrow().column("id").to_pylist()) == expected
    assert any(deletes for deletes in _tasks(server, AlwaysTrue()).values())

    answer = requests.post(
        f"{session_gateway.url}/v1/namespaces/{ns}/tables/t/plan",
        data=json.dumps({"filter": EqualTo("category", "a").model_dump(mode="json", by_alias=True)}),
        headers={"Authorization": f"Bearer {session_gateway.admin_key}"},
        timeout=HTTP_TIMEOUT,
    )
    assert answer.status_code == 200, answer.text
    completed = PlanCompleted.model_validate_json(answer.text)
    paths = [delete_file.file_path for delete_file in completed.delete_files]
    assert len(paths) == len(set(paths)) == 1  # listed once, referenced by both data files
    assert all(delete_file.content == "position-deletes" for delete_file in completed.delete_files)
    assert [task.delete_file_references for task in completed.file_scan_tasks] == [[0], [0]]
