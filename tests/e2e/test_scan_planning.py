"""Server-side scan planning driven by the real pyiceberg 0.12 client (catalog property
``scan-planning-mode=server``) against a real gateway, compared with pyiceberg's own planning.

For every table (unpartitioned; identity + day + bucket partitioned; evolved schema), filter and
snapshot, the server must select exactly the data files pyiceberg's client-side planner selects,
and reading through server-side planning must give the same rows. The gateway answers in pages of
two tasks, so plans with more files also go through plan-tasks (fetchScanTasks). A second gateway
plans everything in the background (``max_sync_manifests = 0``): submitted, polled, cancelled,
expired, and invisible to other principals.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.rest.scan_planning import PlanCompleted, ScanTasks
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    Not,
    NotNull,
    Or,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

from tests.support import registry
from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

HTTP_TIMEOUT = 30
PLAN = "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan"

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "name", StringType(), required=False),
)
PARTITIONED = PartitionSpec(
    PartitionField(2, 1000, IdentityTransform(), "category"),
    PartitionField(3, 1001, DayTransform(), "ts_day"),
    PartitionField(1, 1002, BucketTransform(4), "id_bucket"),
)
FILTERS: list[BooleanExpression] = [
    AlwaysTrue(),
    EqualTo("category", "a"),
    GreaterThanOrEqual("id", 15),
    And(EqualTo("category", "b"), LessThan("id", 12)),
    Or(EqualTo("id", 3), GreaterThan("ts", "2024-01-03T00:00:00")),
    In("category", ["a", "c"]),
    Not(EqualTo("category", "a")),
    IsNull("name"),
]


def batch(ids: range, day: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "category": pa.array(["abc"[i % 3] for i in ids], pa.string()),
            "ts": pa.array([dt.datetime(2024, 1, day, i % 24) for i in ids], pa.timestamp("us")),
            "name": pa.array([None if i % 5 == 0 else f"n{i}" for i in ids], pa.string()),
        }
    )


class Rest:
    """Plain HTTP for what pyiceberg's client does not do (incremental scans, polling, cancel)."""

    def __init__(self, gateway: GatewayProcess, token: str) -> None:
        self.base = gateway.url
        self.headers = {"Authorization": f"Bearer {token}"}

    def table_url(self, table: str) -> str:
        namespace, name = table.split(".")
        return f"{self.base}/v1/namespaces/{urllib.parse.quote(namespace)}/tables/{name}"

    def plan(self, table: str, body: Any) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return requests.post(
            f"{self.table_url(table)}/plan", data=data, headers=self.headers, timeout=HTTP_TIMEOUT
        )

    def result(self, table: str, plan_id: str) -> requests.Response:
        return requests.get(
            f"{self.table_url(table)}/plan/{plan_id}", headers=self.headers, timeout=HTTP_TIMEOUT
        )

    def cancel(self, table: str, plan_id: str) -> requests.Response:
        return requests.delete(
            f"{self.table_url(table)}/plan/{plan_id}", headers=self.headers, timeout=HTTP_TIMEOUT
        )

    def tasks(self, table: str, token: str) -> requests.Response:
        return requests.post(
            f"{self.table_url(table)}/tasks",
            data=json.dumps({"plan-task": token}),
            headers=self.headers,
            timeout=HTTP_TIMEOUT,
        )

    def all_files(self, table: str, completed: PlanCompleted) -> set[str]:
        """Data files of a completed plan and of every page its plan-tasks name."""
        pages: list[ScanTasks] = [completed]
        for token in completed.plan_tasks:
            answer = self.tasks(table, token)
            assert answer.status_code == 200, answer.text
            pages.append(ScanTasks.model_validate_json(answer.text))
        return {task.data_file.file_path for page in pages for task in page.file_scan_tasks}


def error_of(answer: requests.Response) -> tuple[int, str]:
    body = answer.json()["error"]
    assert body["code"] == answer.status_code
    return answer.status_code, body["type"]


@dataclass
class Tables:
    server: RestCatalog  # plans on the gateway
    local: RestCatalog  # plans itself
    rest: Rest
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[GatewayProcess]:
    data_dir = tmp_path_factory.mktemp("planning") / "gateway"
    config = {"planning": {"tasks_per_page": 2}}
    with GatewayProcess(data_dir, store_url=module_store_url, config=config) as gw:
        yield gw


@pytest.fixture(scope="module")
def tables(gateway: GatewayProcess) -> Tables:
    server = make_catalog(gateway, **{"scan-planning-mode": "server"})
    local = make_catalog(gateway)
    server.create_namespace("plan")
    flat = server.create_table("plan.flat", SCHEMA)
    parted = server.create_table("plan.parted", SCHEMA, partition_spec=PARTITIONED)
    for start, day in ((0, 1), (10, 2), (20, 3)):
        flat.append(batch(range(start, start + 10), day))
        parted.append(batch(range(start, start + 10), day))
    evolved = server.create_table("plan.evolved", SCHEMA)
    evolved.append(batch(range(0, 10), 1))
    with evolved.update_schema() as update:
        update.add_column("score", DoubleType())
        update.rename_column("name", "label")
    evolved = server.load_table("plan.evolved")
    evolved.append(
        batch(range(10, 20), 2)
        .rename_columns(["id", "category", "ts", "label"])
        .append_column("score", pa.array([i / 2 for i in range(10, 20)], pa.float64()))
    )
    return Tables(server, local, Rest(gateway, gateway.admin_key), gateway)


def test_the_planning_endpoints_are_advertised(gateway: GatewayProcess) -> None:
    config = requests.get(
        f"{gateway.url}/v1/config",
        headers={"Authorization": f"Bearer {gateway.admin_key}"},
        timeout=HTTP_TIMEOUT,
    ).json()
    endpoints = set(config["endpoints"])
    assert {
        PLAN,
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks",
    } <= endpoints


def _planned(
    table: Table, row_filter: BooleanExpression, snapshot_id: int | None
) -> tuple[set[str], list[int]]:
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id)
    files = {task.file.file_path for task in scan.plan_files()}
    ids = sorted(scan.to_arrow().column("id").to_pylist())
    return files, ids


@pytest.mark.parametrize("name", ["flat", "parted", "evolved"])
def test_server_plans_select_what_pyiceberg_selects(tables: Tables, name: str) -> None:
    server_table = tables.server.load_table(f"plan.{name}")
    local_table = tables.local.load_table(f"plan.{name}")
    assert server_table.scan()._should_use_server_side_planning()
    assert not local_table.scan()._should_use_server_side_planning()
    snapshots = [snapshot.snapshot_id for snapshot in local_table.snapshots()]
    compared = 0
    for snapshot_id in (None, snapshots[0], snapshots[-2]):
        for row_filter in FILTERS:
            if name == "evolved" and isinstance(row_filter, IsNull):
                row_filter = IsNull("label")  # noqa: PLW2901 - the renamed column
            server_files, server_ids = _planned(server_table, row_filter, snapshot_id)
            local_files, local_ids = _planned(local_table, row_filter, snapshot_id)
            assert server_files == local_files, (row_filter, snapshot_id)
            assert server_ids == local_ids, (row_filter, snapshot_id)
            compared += len(server_files)
    assert compared > 0


def test_evolved_columns_filter_in_old_and_new_snapshots(tables: Tables) -> None:
    server_table = tables.server.load_table("plan.evolved")
    first = server_table.snapshots()[0].snapshot_id
    assert _planned(server_table, GreaterThan("score", 8.0), None)[1] == [17, 18, 19]
    assert _planned(server_table, NotNull("score"), first)[1] == []
    renamed = EqualTo("label", "n3")
    assert _planned(server_table, renamed, None)[1] == [3]
    assert _planned(server_table, renamed, first)[1] == [3]


def test_partition_values_and_residuals_arrive_in_spec_order(tables: Tables) -> None:
    answer = tables.rest.plan(
        "plan.parted", {"filter": EqualTo("id", 4).model_dump(mode="json", by_alias=True)}
    )
    assert answer.status_code == 200, answer.text
    completed = PlanCompleted.model_validate_json(answer.text)
    assert len(completed.file_scan_tasks) == 1  # the bucket of id 4 on its day and category
    task = completed.file_scan_tasks[0]
    assert task.data_file.partition[:2] == ["b", "2024-01-01"]
    assert task.residual_filter == EqualTo("id", 4)


@pytest.mark.parametrize("name", ["flat", "parted"])
def test_incremental_scans_plan_the_appended_files(tables: Tables, name: str) -> None:
    local_table = tables.local.load_table(f"plan.{name}")
    first, second, third = (snapshot.snapshot_id for snapshot in local_table.snapshots())
    for start, end in ((first, third), (second, third), (first, second)):
        for row_filter in (AlwaysTrue(), EqualTo("category", "a")):
            body = {
                "start-snapshot-id": start,
                "end-snapshot-id": end,
                "filter": row_filter.model_dump(mode="json", by_alias=True),
            }
            answer = tables.rest.plan(f"plan.{name}", body)
            assert answer.status_code == 200, answer.text
            files = tables.rest.all_files(f"plan.{name}", PlanCompleted.model_validate_json(answer.text))
            local = local_table.incremental_append_scan(
                from_snapshot_id_exclusive=start, to_snapshot_id_inclusive=end, row_filter=row_filter
            )
            assert files == {task.file.file_path for task in local.plan_files()}
            assert files
    answer = tables.rest.plan(f"plan.{name}", {"start-snapshot-id": third, "end-snapshot-id": first})
    assert error_of(answer) == (400, "BadRequestException")
    assert "is not an ancestor" in answer.json()["error"]["message"]


def test_large_plans_come_in_pages_of_plan_tasks(tables: Tables) -> None:
    answer = tables.rest.plan("plan.parted", {})
    completed = PlanCompleted.model_validate_json(answer.text)
    assert len(completed.file_scan_tasks) == 2
    assert completed.plan_id
    assert len(completed.plan_tasks) >= 2
    local = {task.file.file_path for task in tables.local.load_table("plan.parted").scan().plan_files()}
    assert tables.rest.all_files("plan.parted", completed) == local
    # A plan task answers its owner on its table only.
    other_table = tables.rest.tasks("plan.flat", completed.plan_tasks[0])
    assert error_of(other_table) == (404, "NoSuchPlanTaskException")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not valid JSON"),
        ({"snapshot-id": 1, "start-snapshot-id": 1, "end-snapshot-id": 2}, "cannot be combined"),
        ({"start-snapshot-id": 1}, "needs both"),
        ({"snapshot-id": 1}, "is not a snapshot of this table"),
        ({"select": ["nope"]}, "no such column"),
        ({"filter": {"type": "eq", "term": "nope", "value": 1}}, "filter does not apply"),
        ({"filter": {"type": "lt", "term": "id"}}, "filter"),
        ({"filter": {"type": "frobnicate"}}, "filter: unknown expression type 'frobnicate'"),
        ({"filter": {"type": "not", "child": {"type": "nope"}}}, "filter: child: unknown expression type"),
        ({"filter": {"type": "and", "left": {"type": "true"}}}, "filter: the and expression needs right"),
        ({"filter": {"type": "in", "term": "id", "values": "abc"}}, "filter: the in expression needs values"),
        ({"filter": {"type": "eq", "term": "id", "value": [1]}}, "filter: the eq expression needs a value"),
        ({"filter": "true"}, "filter: an expression must be an object"),
        ({"unknown-field": True}, "unknown-field"),
        ({"stats-fields": "id"}, "stats-fields"),
    ],
)
def test_bad_plan_requests_are_400(tables: Tables, body: Any, message: str) -> None:
    answer = tables.rest.plan("plan.flat", body)
    assert error_of(answer) == (400, "BadRequestException")
    text = answer.json()["error"]["message"]
    assert message in text
    assert not any(internal in text for internal in ("instantiate", "abstract", "__", "Error")), text


def test_every_completed_plan_names_its_plan_and_the_id_answers(tables: Tables) -> None:
    """planTableScan's completed answer is a CompletedPlanningWithIDResult (`plan-id` required),
    even for a plan of one page (the control: the paged plan); fetchPlanningResult answers that
    id with the same completed result, a conformant CompletedPlanningResult."""
    rest = tables.rest
    for body in ({"filter": {"type": "eq", "term": "id", "value": 4}}, {}):
        answer = rest.plan("plan.parted", body)
        assert answer.status_code == 200, answer.text
        document = answer.json()
        assert document["status"] == "completed"
        assert isinstance(document["plan-id"], str)
        assert document["plan-id"]
        fetched = rest.result("plan.parted", document["plan-id"])
        assert fetched.status_code == 200, fetched.text
        assert fetched.json() == document
        assert rest.cancel("plan.parted", document["plan-id"]).status_code == 204
    single = rest.plan("plan.parted", {"filter": {"type": "eq", "term": "id", "value": 4}}).json()
    assert "plan-tasks" not in single
    assert len(single["file-scan-tasks"]) == 1


def test_true_and_false_filters_are_always_true_and_always_false(tables: Tables) -> None:
    """The spec's TrueExpression / FalseExpression (`{"type": "true"}` / `{"type": "false"}`),
    alone and nested; the control is the plan without a filter."""
    rest = tables.rest
    everything = rest.all_files(
        "plan.parted", PlanCompleted.model_validate_json(rest.plan("plan.parted", {}).text)
    )
    assert everything
    eq_4 = {"type": "eq", "term": "id", "value": 4}
    for expression, expected in (
        ({"type": "true"}, everything),
        ({"type": "not", "child": {"type": "false"}}, everything),
        ({"type": "or", "left": {"type": "false"}, "right": {"type": "true"}}, everything),
        ({"type": "false"}, set()),
        ({"type": "and", "left": {"type": "true"}, "right": {"type": "false"}}, set()),
    ):
        answer = rest.plan("plan.parted", {"filter": expression})
        assert answer.status_code == 200, (expression, answer.text)
        assert rest.all_files("plan.parted", PlanCompleted.model_validate_json(answer.text)) == expected
    answer = rest.plan("plan.parted", {"filter": {"type": "and", "left": {"type": "true"}, "right": eq_4}})
    assert answer.status_code == 200, answer.text
    assert len(PlanCompleted.model_validate_json(answer.text).file_scan_tasks) == 1


def test_unknown_plans_tables_and_tasks_are_404(tables: Tables) -> None:
    rest = tables.rest
    assert error_of(rest.result("plan.flat", "nope")) == (404, "NoSuchPlanIdException")
    assert error_of(rest.cancel("plan.flat", "nope")) == (404, "NoSuchPlanIdException")
    assert error_of(rest.tasks("plan.flat", "nope")) == (404, "NoSuchPlanTaskException")
    assert error_of(rest.plan("plan.missing", {})) == (404, "NoSuchTableException")
    bad_task = requests.post(
        f"{rest.table_url('plan.flat')}/tasks", data=b"{}", headers=rest.headers, timeout=HTTP_TIMEOUT
    )
    assert error_of(bad_task) == (400, "BadRequestException")


def test_a_table_property_asks_engines_to_plan_on_the_server(tables: Tables) -> None:
    def config_of(name: str) -> dict[str, str]:
        answer = requests.get(tables.rest.table_url(name), headers=tables.rest.headers, timeout=HTTP_TIMEOUT)
        return dict(answer.json()["config"])

    assert "scan-planning-mode" not in config_of("plan.flat")
    table = tables.server.create_table(
        "plan.asks", SCHEMA, properties={"cedarberg.scan-planning-mode": "server"}
    )
    assert config_of("plan.asks")["scan-planning-mode"] == "server"
    with table.transaction() as tx:
        tx.set_properties({"cedarberg.scan-planning-mode": "client"})
    assert config_of("plan.asks")["scan-planning-mode"] == "client"  # a new version, never a stale body
    with table.transaction() as tx:
        tx.remove_properties("cedarberg.scan-planning-mode")
    assert "scan-planning-mode" not in config_of("plan.asks")


# -- background plans ------------------------------------------------------------------------


TTL_SECONDS = 4


@pytest.fixture(scope="module")
def background(
    tmp_path_factory: pytest.TempPathFactory, second_module_store_url: str | None
) -> Iterator[Tables]:
    """A gateway that plans every scan in the background, keeps plans briefly and sweeps often."""
    data_dir = tmp_path_factory.mktemp("planning-background") / "gateway"
    config = {
        "planning": {
            "max_sync_manifests": 0,
            "tasks_per_page": 2,
            "plan_ttl_seconds": TTL_SECONDS,
            "sweep_interval_seconds": 0.5,
        }
    }
    with GatewayProcess(data_dir, store_url=second_module_store_url, config=config) as gw:
        server = make_catalog(gw, **{"scan-planning-mode": "server"})
        server.create_namespace("bg")
        table = server.create_table("bg.t", SCHEMA, partition_spec=PARTITIONED)
        table.append(batch(range(0, 10), 1))
        table.append(batch(range(10, 20), 2))
        yield Tables(server, make_catalog(gw), Rest(gw, gw.admin_key), gw)


def _submitted(tables: Tables, body: dict[str, Any]) -> str:
    answer = tables.rest.plan("bg.t", body)
    assert answer.status_code == 200, answer.text
    document = answer.json()
    assert document["status"] == "submitted"
    assert "file-scan-tasks" not in document
    return str(document["plan-id"])


def _poll(tables: Tables, plan_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        answer = tables.rest.result("bg.t", plan_id)
        assert answer.status_code == 200, answer.text
        document: dict[str, Any] = answer.json()
        if document["status"] != "submitted" or time.monotonic() > deadline:
            return document
        time.sleep(0.05)


def test_large_scans_are_submitted_and_completed_in_the_background(background: Tables) -> None:
    row_filter = EqualTo("category", "a")
    plan_id = _submitted(background, {"filter": row_filter.model_dump(mode="json", by_alias=True)})
    document = _poll(background, plan_id)
    assert document["status"] == "completed"
    completed = PlanCompleted.model_validate(document)
    assert completed.plan_id == plan_id
    local = background.local.load_table("bg.t").scan(row_filter=row_filter).plan_files()
    assert background.rest.all_files("bg.t", completed) == {task.file.file_path for task in local}
    # Fetching again answers the same result.
    assert _poll(background, plan_id) == document


def test_pyicebergs_client_does_not_poll_submitted_plans(background: Tables) -> None:
    table = background.server.load_table("bg.t")
    with pytest.raises(NotImplementedError, match="Async scan planning not yet supported"):
        list(table.scan().plan_files())


def test_cancelled_plans_answer_cancelled_and_lose_their_pages(background: Tables) -> None:
    plan_id = _submitted(background, {})
    completed = PlanCompleted.model_validate(_poll(background, plan_id))
    assert completed.plan_tasks
    assert background.rest.cancel("bg.t", plan_id).status_code == 204
    assert background.rest.result("bg.t", plan_id).json() == {"status": "cancelled"}
    assert error_of(background.rest.tasks("bg.t", completed.plan_tasks[0])) == (
        404,
        "NoSuchPlanTaskException",
    )
    assert background.rest.cancel("bg.t", plan_id).status_code == 204  # cancelling again is harmless


def test_a_plan_answers_only_its_owner(background: Tables) -> None:
    plan_id = _submitted(background, {})
    completed = PlanCompleted.model_validate(_poll(background, plan_id))
    issued = requests.post(
        f"{background.gateway.url}/admin/v1/api-keys",
        json={"principal": "someone-else", "kind": "service", "groups": ["admins"]},
        timeout=HTTP_TIMEOUT,
    )
    assert issued.status_code in (200, 201), issued.text
    other = Rest(background.gateway, issued.json()["key"])
    assert error_of(other.result("bg.t", plan_id)) == (404, "NoSuchPlanIdException")
    assert error_of(other.cancel("bg.t", plan_id)) == (404, "NoSuchPlanIdException")
    assert error_of(other.tasks("bg.t", completed.plan_tasks[0])) == (404, "NoSuchPlanTaskException")
    assert background.rest.result("bg.t", plan_id).json()["status"] == "completed"  # untouched


def _plan_rows(gateway: GatewayProcess) -> int:
    return int(registry.query(gateway, "SELECT count(*) FROM scan_plans")[0][0])


def test_plans_expire_and_are_swept(background: Tables) -> None:
    plan_id = _submitted(background, {})
    completed = PlanCompleted.model_validate(_poll(background, plan_id))
    assert _plan_rows(background.gateway) >= 1
    time.sleep(TTL_SECONDS + 1)
    assert error_of(background.rest.result("bg.t", plan_id)) == (404, "NoSuchPlanIdException")
    assert error_of(background.rest.tasks("bg.t", completed.plan_tasks[0])) == (
        404,
        "NoSuchPlanTaskException",
    )
    deadline = time.monotonic() + 10
    while _plan_rows(background.gateway) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _plan_rows(background.gateway) == 0


def test_plans_live_in_postgresql_too(postgres_url: str, tmp_path: Path) -> None:
    """The same plan life cycle on the scale-out store: synchronous pages, a background plan,
    its pages, cancellation and expiry."""
    config = {
        "planning": {
            "max_sync_manifests": 1,
            "tasks_per_page": 1,
            "plan_ttl_seconds": 2,
            "sweep_interval_seconds": 0.3,
        }
    }
    with GatewayProcess(tmp_path / "gateway", store_url=postgres_url, config=config) as gw:
        catalog = make_catalog(gw)
        catalog.create_namespace("pg")
        table = catalog.create_table("pg.t", SCHEMA)
        table.append(batch(range(0, 5), 1))
        rest = Rest(gw, gw.admin_key)
        one_manifest = table.snapshots()[0].snapshot_id
        answer = rest.plan("pg.t", {"snapshot-id": one_manifest})
        completed = PlanCompleted.model_validate_json(answer.text)
        assert completed.status == "completed"
        table.append(batch(range(5, 10), 2))
        local = {task.file.file_path for task in table.scan().plan_files()}
        plan_id = str(rest.plan("pg.t", {}).json()["plan-id"])  # two manifests: background
        deadline = time.monotonic() + 20
        while (document := rest.result("pg.t", plan_id).json())["status"] == "submitted":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        background_plan = PlanCompleted.model_validate(document)
        assert len(background_plan.plan_tasks) == 1
        assert rest.all_files("pg.t", background_plan) == local
        assert rest.cancel("pg.t", plan_id).status_code == 204
        assert rest.result("pg.t", plan_id).json() == {"status": "cancelled"}
        time.sleep(2.5)
        assert error_of(rest.result("pg.t", plan_id)) == (404, "NoSuchPlanIdException")


def test_a_plan_that_fails_in_the_background_answers_failed(background: Tables) -> None:
    table = background.server.create_table("bg.broken", SCHEMA)
    table.append(batch(range(0, 3), 1))
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path  # type: ignore[union-attr]
    Path(urllib.parse.urlparse(manifest).path).unlink()
    answer = background.rest.plan("bg.broken", {})
    plan_id = str(answer.json()["plan-id"])
    deadline = time.monotonic() + 20
    while (document := background.rest.result("bg.broken", plan_id).json())["status"] == "submitted":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert document == {
        "status": "failed",
        "error": {
            "message": "cannot read the table's manifests: FileNotFoundError",
            "type": "ServiceUnavailableException",
            "code": 503,
        },
    }


def test_planning_beyond_the_concurrency_bound_is_refused_not_queued(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """One plan slot. The first plan takes it and then waits for the registry, which the test
    holds locked; meanwhile another plan is refused with 503 and Retry-After."""
    data_dir = tmp_path_factory.mktemp("planning-busy") / "gateway"
    config = {"planning": {"max_concurrent_plans": 1, "tasks_per_page": 1, "retry_after_seconds": 7}}
    with GatewayProcess(data_dir, config=config) as gw:
        catalog = make_catalog(gw)
        catalog.create_namespace("busy")
        catalog.create_table("busy.t", SCHEMA).append(batch(range(0, 4), 1))
        catalog.load_table("busy.t").append(batch(range(4, 8), 2))
        rest = Rest(gw, gw.admin_key)
        one_file = {"filter": EqualTo("id", 1).model_dump(mode="json", by_alias=True)}
        with ThreadPoolExecutor(max_workers=1) as pool:
            lock = sqlite3.connect(gw.data_dir / "catalog.db", isolation_level=None)
            try:
                lock.execute("BEGIN IMMEDIATE")  # no plan can store its result now
                first = pool.submit(rest.plan, "busy.t", {})
                # Every plan stores its result, so a plan that got the slot waits for the lock
                # (up to the registry's busy timeout, 10 s). Give the first one ample time to
                # take the slot before the second asks: only then is the second refused by the
                # bound rather than stuck behind the lock itself.
                time.sleep(0.5)
                deadline = time.monotonic() + 5
                while True:
                    if first.done():  # it met one of ours in the slot: try again
                        assert first.result().status_code == 503
                        first = pool.submit(rest.plan, "busy.t", {})
                        time.sleep(0.5)
                    refused = rest.plan("busy.t", one_file)
                    if refused.status_code == 503 or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                assert error_of(refused) == (503, "ServiceUnavailableException")
                assert refused.headers["Retry-After"] == "7"
                assert not first.done()
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            completed = PlanCompleted.model_validate_json(first.result().text)
        assert len(completed.plan_tasks) == 1
        assert rest.plan("busy.t", one_file).status_code == 200  # the slot is free again
