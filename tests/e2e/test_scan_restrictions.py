"""Column and row restrictions written in Cedar, enforced on server-side scan planning.

A real gateway over HTTPS with real API keys, the bundled policies plus `restrictions.cedar`, and
the real pyiceberg 0.12 client planning server-side (`scan-planning-mode=server`). The table is
partitioned by region, so a row filter on region prunes whole files.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from tests.support.gateway import bundled_policies
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import TestPki

TIMEOUT = 30
ORDERS = 'Cedarberg::Table::"default/shop/orders"'
BY_CUSTOMER = 'Cedarberg::Table::"default/shop/by_customer"'
PLANNING = (
    '[Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan", '
    'Cedarberg::Action::"fetchPlanningResult", Cedarberg::Action::"cancelPlanning", '
    'Cedarberg::Action::"fetchScanTasks", Cedarberg::Action::"loadCredentials", '
    'Cedarberg::Action::"tableExists"]'
)
RESTRICTIONS = f"""
@id("eu-analysts-orders")
@columns("order_id, region, amount")
@row_filter("region = 'eu'")
permit (principal in Cedarberg::Group::"eu-analysts", action in {PLANNING}, resource == {ORDERS});

@id("eu-analysts-by-customer")
@columns("order_id, amount")
permit (principal in Cedarberg::Group::"eu-analysts", action in {PLANNING}, resource == {BY_CUSTOMER});

@id("big-spenders-orders")
@columns("order_id, region, amount, customer")
@row_filter("amount >= 100")
permit (principal in Cedarberg::Group::"big-spenders", action in {PLANNING}, resource == {ORDERS});
"""
SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
    NestedField(4, "customer", StringType(), required=False),
)
REGIONS = ("eu", "us", "apac")


def _rows(region: str, start: int) -> pa.Table:
    ids = list(range(start, start + 4))
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "region": pa.array([region] * 4, pa.string()),
            "amount": pa.array([float(i * 40) for i in ids], pa.float64()),
            "customer": pa.array([f"c{i}" for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki, module_store_url: str | None
) -> Iterator[SecureGateway]:
    root = tmp_path_factory.mktemp("restrictions")
    policy_dir = root / "policies"
    bundled_policies(policy_dir, {"restrictions.cedar": RESTRICTIONS})
    config = {"authz": {"policy_dir": str(policy_dir)}}
    with (
        pytest.MonkeyPatch.context() as env,
        SecureGateway(root / "gw", pki=session_pki, config=config, store_url=module_store_url) as gw,
    ):
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the test CA
            env.delenv(name, raising=False)
        gw.create_namespace("shop", readers=["analysts"])
        admin = gw.admin_catalog()
        for name, source in (("orders", 2), ("by_customer", 4)):
            spec = PartitionSpec(PartitionField(source, 1000, IdentityTransform(), "part"))
            table = admin.create_table(("shop", name), SCHEMA, partition_spec=spec)
            for n, region in enumerate(REGIONS):
                table.append(_rows(region, 10 * n))
        yield gw


def _catalog(gw: SecureGateway, principal: str, *groups: str) -> RestCatalog:
    key = gw.create_key(principal, list(groups))
    return gw.catalog(principal, token=key, **{"scan-planning-mode": "server"})


def _plan(
    gw: SecureGateway, session: requests.Session, table: str, body: dict[str, Any]
) -> requests.Response:
    return session.post(gw.catalog_url(f"namespaces/shop/tables/{table}/plan"), json=body, timeout=TIMEOUT)


def _files(catalog: RestCatalog, table: str, **scan: Any) -> list[str]:
    return sorted(
        task.file.file_path for task in catalog.load_table(("shop", table)).scan(**scan).plan_files()
    )


def test_a_restricted_principal_plans_only_allowed_columns(gateway: SecureGateway) -> None:
    analyst = _catalog(gateway, "eva", "eu-analysts")
    table = analyst.load_table(("shop", "orders"))
    assert _files(analyst, "orders", selected_fields=("order_id", "amount"))
    for scan in (
        {"selected_fields": ("order_id", "customer")},  # a forbidden column selected
        {},  # no select: every column
        {"selected_fields": ("order_id",), "row_filter": EqualTo("customer", "c1")},  # filtered on
    ):
        with pytest.raises(ForbiddenError) as refused:
            list(table.scan(**scan).plan_files())
        assert "customer" in str(refused.value)


def test_stats_fields_count_as_touched_columns(gateway: SecureGateway) -> None:
    session = gateway.session(gateway.create_key("eve", ["eu-analysts"]))
    refused = _plan(gateway, session, "orders", {"select": ["order_id"], "stats-fields": ["customer"]})
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["type"] == "ForbiddenException"
    allowed = _plan(gateway, session, "orders", {"select": ["order_id"], "stats-fields": ["amount"]})
    assert allowed.status_code == 200, allowed.text


def test_the_row_filter_prunes_files_and_is_in_every_residual(gateway: SecureGateway) -> None:
    session = gateway.session(gateway.create_key("ezra", ["eu-analysts"]))
    planned = _plan(gateway, session, "orders", {"select": ["order_id", "amount"]})
    assert planned.status_code == 200, planned.text
    body = planned.json()
    assert body["status"] == "completed"
    tasks = body["file-scan-tasks"]
    assert len(tasks) == 1  # the eu file only: the other regions' files are pruned
    assert tasks[0]["data-file"]["partition"] == ["eu"]
    # Every row of the eu file matches region = 'eu', so the residual may be `true`; ask for a
    # filter the partition cannot decide and the policy's filter stays beside it.
    mixed = _plan(
        gateway,
        session,
        "orders",
        {"select": ["order_id"], "filter": {"type": "gt", "term": "amount", "value": 50.0}},
    ).json()
    assert [t["data-file"]["partition"] for t in mixed["file-scan-tasks"]] == [["eu"]]

    unrestricted = gateway.session(gateway.create_key("ann", ["analysts"]))
    everything = _plan(gateway, unrestricted, "orders", {"select": ["order_id"]}).json()
    assert len(everything["file-scan-tasks"]) == len(REGIONS)


def test_a_row_filter_on_an_unpartitioned_column_shows_in_the_residual(gateway: SecureGateway) -> None:
    spender = _catalog(gateway, "bo", "big-spenders")
    table = spender.load_table(("shop", "orders"))
    tasks = list(table.scan(selected_fields=("order_id", "amount")).plan_files())
    assert len(tasks) == len(REGIONS)  # amount does not prune partitions by region
    for task in tasks:
        # pyiceberg parsed the residual the gateway sent: the policy's filter, bound to the file.
        assert "amount" in repr(task.residual), task.residual
        assert "100" in repr(task.residual), task.residual
    # A filter the caller adds is ANDed with the policy's, never replaces it.
    narrowed = list(
        table.scan(selected_fields=("order_id", "amount"), row_filter="amount < 500").plan_files()
    )
    assert len(narrowed) == 2  # apac's amounts are all >= 800
    for task in narrowed:
        assert "100" in repr(task.residual), task.residual
        assert "500" in repr(task.residual), task.residual


def test_two_restricted_permits_each_allow_their_own_scans(gateway: SecureGateway) -> None:
    session = gateway.session(gateway.create_key("both", ["eu-analysts", "big-spenders"]))
    # Fits both permits: rows of either filter. The eu file matches region = 'eu' whole (no
    # residual); the others keep the big spenders' amount >= 100.
    either = _plan(gateway, session, "orders", {"select": ["order_id", "amount"]}).json()
    residuals = {t["data-file"]["partition"][0]: t.get("residual-filter") for t in either["file-scan-tasks"]}
    assert set(residuals) == set(REGIONS)
    assert residuals["eu"] is None
    assert residuals["us"] == {"type": "gt-eq", "term": "amount", "value": 100.0}
    # Selects customer: fits only the big spenders' permit, whose filter binds every file.
    theirs = _plan(gateway, session, "orders", {"select": ["order_id", "customer"]}).json()
    for task in theirs["file-scan-tasks"]:
        assert task["residual-filter"] == {"type": "gt-eq", "term": "amount", "value": 100.0}


def test_a_table_partitioned_by_a_forbidden_column_cannot_be_planned(gateway: SecureGateway) -> None:
    # Partition tuples and file paths (customer=c1/...) would reveal every customer.
    session = gateway.session(gateway.create_key("eli", ["eu-analysts"]))
    refused = _plan(gateway, session, "by_customer", {"select": ["order_id", "amount"]})
    assert refused.status_code == 403, refused.text
    assert "partitioned by columns you may not scan (customer)" in refused.json()["error"]["message"]
    # A forbidden column of the request itself is named first.
    own = _plan(gateway, session, "by_customer", {"select": ["order_id", "region"]})
    assert own.status_code == 403, own.text
    assert own.json()["error"]["message"] == "not allowed to scan these columns: region"
    admin = gateway.session(gateway.admin_key)
    full = _plan(gateway, admin, "by_customer", {"select": ["order_id"]}).json()
    customers = sorted(t["data-file"]["partition"][0] for t in full["file-scan-tasks"])
    assert customers == sorted(f"c{10 * n + i}" for n in range(len(REGIONS)) for i in range(4))


def test_restricted_principals_get_no_file_credentials(gateway: SecureGateway) -> None:
    session = gateway.session(gateway.create_key("emma", ["eu-analysts"]))
    refused = session.get(gateway.catalog_url("namespaces/shop/tables/orders/credentials"), timeout=TIMEOUT)
    assert refused.status_code == 403, refused.text
    assert "restrict" in refused.json()["error"]["message"]
