"""ClickHouse 26.9 (chdb 4.4.0) against the gateway through its ``DataLakeCatalog`` database engine.

ClickHouse asks the REST API for a table's ``metadata-location`` and then reads that metadata file
from storage itself, so it only works on a warehouse with ``seal_metadata_files = false``; on a
sealed warehouse it fails with a JSON parse error (``test_sealed_warehouse_fails_clearly``).

The set-up, all on loopback: a moto S3 server (ClickHouse's REST catalog reads S3, Azure or HDFS
tables, not ``file://`` ones), one gateway process with three S3 warehouses: ``lake`` (unsealed,
and the gateway's ``default_warehouse``: see the DROP tests), ``other`` (unsealed) and ``sealed``;
and ClickHouse in a child process (``tests.support.clickhouse``) with one database per warehouse,
authenticated with an API key as OAuth2 client credentials. The gateway speaks plain HTTP, as for
the other engine suites (``session_gateway``). pyiceberg checks what ClickHouse wrote, and writes
what ClickHouse reads.

Two ClickHouse client bugs are pinned here, with their workaround (docs/engines.md, "Known client
bugs"): ``DROP TABLE`` is sent without the warehouse prefix (to the gateway's default warehouse),
and a DROP answered ``204`` is sent again, so ClickHouse reports the ``404`` of its second request.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.clickhouse import ClickHouse, ClickHouseError
from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess
from tests.support.s3 import REGION, MotoS3Server, moto_s3_server

pytestmark = pytest.mark.clickhouse

SEALED = b"\x00CBSEAL"
NOT_JSON = "JSON object/array should start with corresponding opening bracket"
WAREHOUSES = ("lake", "other", "sealed")


def unique(label: str) -> str:
    return f"ch_{label}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3Server]:
    with moto_s3_server() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(s3: MotoS3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "warehouses": {
            "lake": s3.warehouse("lake", seal=False),
            "other": s3.warehouse("other", seal=False),
            "sealed": s3.warehouse("sealed"),
        },
        "default_warehouse": "lake",
        "access_log": True,
    }
    with GatewayProcess(tmp_path_factory.mktemp("clickhouse") / "gateway", config=config) as gw:
        yield gw


@pytest.fixture(scope="module")
def clickhouse(gateway: GatewayProcess, s3: MotoS3Server) -> Iterator[ClickHouse]:
    """ClickHouse with databases ``lake``, ``other`` and ``sealed``, one per gateway warehouse."""
    key = re.fullmatch(r"cbk_([A-Za-z0-9]{16})_(.+)", gateway.admin_key)
    assert key is not None, "API keys are cbk_<16-character id>_<secret>"
    client_id, client_secret = key.groups()
    ch = ClickHouse()
    try:
        for warehouse in WAREHOUSES:
            ch.execute(
                f"CREATE DATABASE {warehouse} ENGINE = DataLakeCatalog('{gateway.url}/v1', "
                f"'{s3.access_key_id}', '{s3.secret_access_key}') SETTINGS "
                f"catalog_type = 'rest', warehouse = '{warehouse}', "
                f"catalog_credential = '{client_id}:{client_secret}', "
                f"oauth_server_uri = '{gateway.url}/v1/oauth/tokens', auth_scope = 'catalog', "
                f"storage_endpoint = '{s3.url}/{s3.bucket}', region = '{REGION}', "
                "vended_credentials = false"
            )
        yield ch
    finally:
        ch.close()


def pyiceberg(gateway: GatewayProcess, s3: MotoS3Server, warehouse: str) -> RestCatalog:
    return make_catalog(
        gateway,
        warehouse=warehouse,
        **{
            "s3.endpoint": s3.url,
            "s3.region": REGION,
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
        },
    )


@pytest.fixture
def lake(gateway: GatewayProcess, s3: MotoS3Server) -> Iterator[RestCatalog]:
    catalog = pyiceberg(gateway, s3, "lake")
    yield catalog
    catalog.close()


def rows(catalog: RestCatalog, identifier: str) -> list[dict[str, Any]]:
    table = catalog.load_table(identifier).scan().to_arrow()
    return sorted(table.to_pylist(), key=lambda row: row["id"])


def sample(ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "tag": pa.array([f"t{i}" for i in ids], pa.string()),
        }
    )


def metadata_key(catalog: RestCatalog, identifier: str, s3: MotoS3Server) -> str:
    location = catalog.load_table(identifier).metadata_location
    prefix = f"s3://{s3.bucket}/"
    assert location.startswith(prefix)
    return location.removeprefix(prefix)


def deletes(gateway: GatewayProcess, fragment: str) -> list[str]:
    """The gateway's access-log lines for DELETE requests whose path contains ``fragment``, as
    ``DELETE path status``."""
    pattern = re.compile(r"(DELETE) (\S+) (\d{3}) [\d.]+ms")
    lines = []
    for line in gateway.log_text().splitlines():
        found = pattern.search(line)
        if found is not None and fragment in found.group(2):
            lines.append(f"{found.group(1)} {found.group(2)} {found.group(3)}")
    return lines


# -- catalog and data, unsealed warehouse ----------------------------------------------------------


def test_lists_tables_of_the_warehouse(clickhouse: ClickHouse, lake: RestCatalog) -> None:
    ns = unique("list")
    lake.create_namespace(ns)
    for name in ("a", "b"):
        lake.create_table(f"{ns}.{name}", schema=sample([]).schema)
    listed = clickhouse.query(f"SHOW TABLES FROM lake LIKE '{ns}.%'")
    assert sorted(row[0] for row in listed) == [f"{ns}.a", f"{ns}.b"]
    # Another warehouse's database does not list them.
    assert clickhouse.query(f"SHOW TABLES FROM other LIKE '{ns}.%'") == []


def test_reads_a_table_written_by_pyiceberg(clickhouse: ClickHouse, lake: RestCatalog) -> None:
    ns = unique("read")
    lake.create_namespace(ns)
    table = lake.create_table(f"{ns}.t", schema=sample([]).schema)
    table.append(sample([3, 1, 2]))
    table.append(sample([4]))
    table.delete("id = 2")
    assert clickhouse.query(f"SELECT id, tag FROM lake.`{ns}.t` ORDER BY id") == [
        [1, "t1"],
        [3, "t3"],
        [4, "t4"],
    ]
    assert clickhouse.query(f"SELECT count(), sum(id) FROM lake.`{ns}.t` WHERE id > 1") == [[2, 7]]


def test_insert_is_read_back_by_pyiceberg(
    clickhouse: ClickHouse, lake: RestCatalog, s3: MotoS3Server
) -> None:
    ns = unique("insert")
    lake.create_namespace(ns)
    table = lake.create_table(f"{ns}.t", schema=sample([]).schema)
    table.append(sample([1]))
    before = lake.load_table(f"{ns}.t")

    clickhouse.execute(f"INSERT INTO lake.`{ns}.t` VALUES (2, 'from-clickhouse'), (3, 'ch')")

    after = lake.load_table(f"{ns}.t")
    assert after.metadata_location != before.metadata_location  # committed through the gateway
    assert len(after.snapshots()) == len(before.snapshots()) + 1
    assert after.current_snapshot() is not None
    assert after.current_snapshot().summary["total-records"] == "3"  # type: ignore[union-attr]
    assert rows(lake, f"{ns}.t") == [
        {"id": 1, "tag": "t1"},
        {"id": 2, "tag": "from-clickhouse"},
        {"id": 3, "tag": "ch"},
    ]
    # The metadata file ClickHouse wrote is plain Iceberg JSON, as the warehouse asks.
    assert s3.read(metadata_key(lake, f"{ns}.t", s3)).lstrip().startswith(b"{")


def test_create_table_then_insert(clickhouse: ClickHouse, lake: RestCatalog, s3: MotoS3Server) -> None:
    ns = unique("create")
    lake.create_namespace(ns)
    # ClickHouse's engine clause names the location; it must be an object directory of the
    # namespace (`<name>-<32 hex>`, catalog/roots.py), so that no future child namespace's is taken.
    directory = f"made_by_clickhouse-{uuid.uuid4().hex}"
    location = f"{s3.url}/{s3.bucket}/lake/{ns}/{directory}/"
    clickhouse.execute(
        f"CREATE TABLE lake.`{ns}.made` (id Int64, name Nullable(String)) "
        f"ENGINE = IcebergS3('{location}', '{s3.access_key_id}', '{s3.secret_access_key}')"
    )
    assert lake.table_exists(f"{ns}.made")
    created = lake.load_table(f"{ns}.made")
    assert [(f.name, str(f.field_type), f.required) for f in created.schema().fields] == [
        ("id", "long", True),
        ("name", "string", False),
    ]
    assert created.location() == f"s3://{s3.bucket}/lake/{ns}/{directory}"

    clickhouse.execute(f"INSERT INTO lake.`{ns}.made` VALUES (1, 'one'), (2, NULL)")
    assert rows(lake, f"{ns}.made") == [{"id": 1, "name": "one"}, {"id": 2, "name": None}]
    assert [row[0] for row in clickhouse.query(f"SHOW TABLES FROM lake LIKE '{ns}.%'")] == [f"{ns}.made"]


def test_alter_add_column(clickhouse: ClickHouse, lake: RestCatalog) -> None:
    ns = unique("alter")
    lake.create_namespace(ns)
    lake.create_table(f"{ns}.t", schema=sample([]).schema).append(sample([1]))

    clickhouse.execute(f"ALTER TABLE lake.`{ns}.t` ADD COLUMN score Nullable(Float64)")

    schema = lake.load_table(f"{ns}.t").schema()
    assert [f.name for f in schema.fields] == ["id", "tag", "score"]
    assert str(schema.find_field("score").field_type) == "double"
    clickhouse.execute(f"INSERT INTO lake.`{ns}.t` VALUES (2, 't2', 2.5)")
    assert rows(lake, f"{ns}.t") == [
        {"id": 1, "tag": "t1", "score": None},
        {"id": 2, "tag": "t2", "score": 2.5},
    ]
    assert clickhouse.query(f"SELECT id, score FROM lake.`{ns}.t` ORDER BY id") == [[1, None], [2, 2.5]]


# -- known client bugs: DROP TABLE ---------------------------------------------------------------


def test_drop_is_sent_without_prefix_and_repeated_after_204(
    clickhouse: ClickHouse, lake: RestCatalog, gateway: GatewayProcess
) -> None:
    """In the default warehouse the DROP lands (204); ClickHouse sends it again and fails on the 404."""
    ns = unique("drop")
    lake.create_namespace(ns)
    lake.create_table(f"{ns}.t", schema=sample([]).schema)

    with pytest.raises(ClickHouseError) as failure:
        clickhouse.execute(f"DROP TABLE lake.`{ns}.t`")

    assert f"/v1/namespaces/{ns}/tables/t?purgeRequested" in str(failure.value)  # no /v1/lake/...
    assert "404" in str(failure.value)
    assert not lake.table_exists(f"{ns}.t")  # the first request dropped it
    assert deletes(gateway, f"/{ns}/") == [
        f"DELETE /v1/namespaces/{ns}/tables/t 204",
        f"DELETE /v1/namespaces/{ns}/tables/t 404",
    ]


def test_drop_in_another_warehouse_reaches_the_default_one(
    clickhouse: ClickHouse, gateway: GatewayProcess, s3: MotoS3Server, lake: RestCatalog
) -> None:
    """ClickHouse's DROP of ``other.ns.t`` asks the default warehouse (``lake``) for ``ns.t``: it fails
    when ``lake`` has no such table and drops ``lake``'s table when it has one. The workaround: drop
    through a client that sends the prefix (pyiceberg here), or give ClickHouse only the default
    warehouse."""
    ns = unique("wrongwh")
    other = pyiceberg(gateway, s3, "other")
    try:
        other.create_namespace(ns)
        other.create_table(f"{ns}.t", schema=sample([]).schema)

        with pytest.raises(ClickHouseError, match=re.escape(f"Table does not exist: {ns}.t")) as failure:
            clickhouse.execute(f"DROP TABLE other.`{ns}.t`")
        assert f"/v1/namespaces/{ns}/tables/t?purgeRequested" in str(failure.value)
        assert other.table_exists(f"{ns}.t")  # untouched
        assert deletes(gateway, f"/{ns}/") == [f"DELETE /v1/namespaces/{ns}/tables/t 404"]  # not repeated

        # With a same-named table in the default warehouse, that one is dropped.
        lake.create_namespace(ns)
        lake.create_table(f"{ns}.t", schema=sample([]).schema)
        with pytest.raises(ClickHouseError, match="404"):
            clickhouse.execute(f"DROP TABLE other.`{ns}.t`")
        assert not lake.table_exists(f"{ns}.t")
        assert other.table_exists(f"{ns}.t")

        # The workaround: drop it through a client that names the warehouse.
        other.drop_table(f"{ns}.t")
        assert not other.table_exists(f"{ns}.t")
        assert deletes(gateway, f"/{ns}/")[-1] == f"DELETE /v1/other/namespaces/{ns}/tables/t 204"
        assert clickhouse.query(f"SHOW TABLES FROM other LIKE '{ns}.%'") == []
    finally:
        other.close()


# -- sealed warehouse ------------------------------------------------------------------------------


def test_sealed_warehouse_fails_clearly(
    clickhouse: ClickHouse, gateway: GatewayProcess, s3: MotoS3Server
) -> None:
    ns = unique("sealed")
    sealed = pyiceberg(gateway, s3, "sealed")
    try:
        sealed.create_namespace(ns)
        sealed.create_table(f"{ns}.t", schema=sample([]).schema).append(sample([1, 2]))
        assert s3.read(metadata_key(sealed, f"{ns}.t", s3)).startswith(SEALED)

        # Listing goes through the API and works; anything that reads the metadata file fails.
        listed = clickhouse.query(f"SHOW TABLES FROM sealed LIKE '{ns}.%'")
        assert [row[0] for row in listed] == [f"{ns}.t"]
        for statement in (
            f"SELECT count() FROM sealed.`{ns}.t`",
            f"INSERT INTO sealed.`{ns}.t` VALUES (3, 't3')",
            f"ALTER TABLE sealed.`{ns}.t` ADD COLUMN x Nullable(Int32)",
        ):
            with pytest.raises(ClickHouseError, match=re.escape(NOT_JSON)):
                clickhouse.execute(statement)

        # Nothing was committed, and clients that load metadata through the API read the table.
        table = sealed.load_table(f"{ns}.t")
        assert len(table.snapshots()) == 1
        assert [f.name for f in table.schema().fields] == ["id", "tag"]
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2]
    finally:
        sealed.close()
