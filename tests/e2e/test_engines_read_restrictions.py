"""What the real engines do with the `read-restrictions` a restricted reader's loadTable carries.

A real gateway over HTTPS with the bundled policies plus two restricted permits on `sales.orders`
(`eu-analysts`: `@columns` + `@row_filter`; `maskers`: `@mask`), a namespace reader `bi` as the
control, and two warehouses holding the same table (four rows, two regions, partitioned by region):

- `lake`: S3 on a moto server that checks every signature, with vending (unsealed, so ClickHouse
  can read it). Restricted readers get no credentials and no signing from the gateway, so their
  engines must fail to read the files: an error, never rows. The engines are given the S3
  endpoint themselves (the gateway sends none to a caller it gives no access), so nothing ever
  leaves loopback.
- `local`: a `file://` warehouse the test process can read, i.e. an engine with storage access of
  its own. There each engine reads every row and every column unmasked for the restricted readers
  too: the direct proof that it ignores `read-restrictions` (a client that starts applying them
  fails these tests, as one that starts reading rows from `lake` without credentials does).

The engines: pyiceberg 0.12, DuckDB 1.5.5 (iceberg extension from the installed packages), Spark
3.5.9 with the Iceberg 1.10.2 runtime (the session-wide `spark` fixture; it has no S3 client here,
see `test_spark_*`), ClickHouse 26.9 through chdb 4.4.0 (`DataLakeCatalog`). pyiceberg's
server-side planning is the supported path for restricted readers and is checked too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from tests.support.audit import flushed_audit_log
from tests.support.clickhouse import ClickHouse, ClickHouseError
from tests.support.gateway import bundled_policies
from tests.support.s3 import REGION, MotoS3Server, moto_s3_server
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway, split_key
from tests.support.tls import TestPki

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TIMEOUT = 30
WAREHOUSES = ("lake", "local")
RESTRICTED_PERMITS = """
@id("eu-analysts-orders-{warehouse}")
@columns("id, region, amount")
@row_filter("region = 'eu'")
permit (
  principal in Cedarberg::Group::"eu-analysts",
  action in Cedarberg::Action::"read",
  resource == Cedarberg::Table::"{warehouse}/sales/orders"
);

@id("maskers-orders-{warehouse}")
@mask("email: mask-alphanum")
permit (
  principal in Cedarberg::Group::"maskers",
  action in Cedarberg::Action::"read",
  resource == Cedarberg::Table::"{warehouse}/sales/orders"
);
"""
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "email", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
)
COLUMNS = ["id", "region", "email", "amount"]
ROWS = [
    (1, "eu", "ann@example.com", 10.0),
    (2, "us", "bob@example.com", 20.0),
    (3, "eu", "cy@example.com", 30.0),
    (4, "us", "di@example.com", 40.0),
]
RESTRICTED = ("eva", "max")  # eu-analysts (columns and rows), maskers (a mask)
# What the gateway tells them (field ids of SCHEMA): what no engine here applies.
READ_RESTRICTIONS = {
    "eva": {
        "required-column-projections": [{"field-id": 3, "action": "replace-with-null"}],
        "required-row-filter": {
            "type": "eq",
            "left": {"type": "reference", "id": 2},
            "right": {"type": "literal", "value": "eu"},
        },
    },
    "max": {"required-column-projections": [{"field-id": 3, "action": "mask-alphanum"}]},
}


@dataclass
class Lake:
    gateway: SecureGateway
    s3: MotoS3Server
    pki: TestPki
    audit: Path
    keys: dict[str, str]

    def catalog(self, who: str, warehouse: str, **props: str) -> RestCatalog:
        """pyiceberg as `who`, with the S3 endpoint (never credentials) configured client-side."""
        endpoint = {"s3.endpoint": self.s3.url, "s3.region": REGION} if warehouse == "lake" else {}
        return self.gateway.catalog(
            f"{who}-{warehouse}",
            credential=self.gateway.credential(self.keys[who]),
            warehouse=warehouse,
            **endpoint,
            **props,
        )

    def duckdb(self, who: str, warehouse: str) -> duckdb.DuckDBPyConnection:
        """DuckDB as `who`; S3 requests without a vended secret go to moto, unsigned."""
        con = self.gateway.duckdb(self.keys[who], warehouse=warehouse)
        host = self.s3.url.removeprefix("http://")
        for setting in (
            f"s3_endpoint = '{host}'",
            "s3_url_style = 'path'",
            "s3_use_ssl = false",
            f"s3_region = '{REGION}'",
        ):
            con.execute(f"SET {setting}")
        return con

    def loads_allowed(self, who: str, since: int) -> int:
        """How many loadTable requests of `who` the gateway allowed after the `since`-th record."""
        return sum(
            1
            for r in flushed_audit_log(self.audit)[since:]
            if r["principal"] == f"key:{who}" and r["action"] == "loadTable" and r["decision"] == "allow"
        )

    def audit_mark(self) -> int:
        return len(flushed_audit_log(self.audit))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    base = tmp_path_factory.mktemp("engines-restrictions")
    policies = base / "policies"
    bundled_policies(
        policies, {"restrictions.cedar": "".join(RESTRICTED_PERMITS.format(warehouse=w) for w in WAREHOUSES)}
    )
    audit = base / "audit.jsonl"
    with pytest.MonkeyPatch.context() as env, moto_s3_server() as s3:
        for name in AMBIENT_CA_VARIABLES:  # pyiceberg/requests trust only the test CA
            env.delenv(name, raising=False)
        # Clients without credentials must not look for any on the network (instance metadata).
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        config = {
            "default_warehouse": "lake",
            "warehouses": {
                "lake": s3.warehouse("lake", vending=True, seal=False),
                "local": {"location": (base / "local").as_uri(), "drop_retention_seconds": 0},
            },
            "authz": {"policy_dir": str(policies)},
            "audit": {"destination": str(audit)},
        }
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            keys = {
                name: gateway.create_key(name, groups)
                for name, groups in (("ann", ["bi"]), ("eva", ["eu-analysts"]), ("max", ["maskers"]))
            }
            data = pa.table({name: [row[i] for row in ROWS] for i, name in enumerate(COLUMNS)})
            spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
            for warehouse in WAREHOUSES:
                admin = gateway.catalog(f"admin-{warehouse}", token=gateway.admin_key, warehouse=warehouse)
                admin.create_namespace("sales", {"cedarberg.readers": "bi"})
                admin.create_table("sales.orders", SCHEMA, partition_spec=spec).append(data)
                admin.close()
            yield Lake(gateway, s3, session_pki, audit, keys)


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(row) for row in rows), key=lambda row: row[0])


def _arrow_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return _sorted([tuple(row.values()) for row in table.to_pylist()])


def _refused_read(read: Callable[[], Any], error: type[BaseException], *fragments: str) -> str:
    """`read()` must raise `error` whose message holds every fragment; never return rows."""
    with pytest.raises(error) as raised:
        read()
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


# -- what the gateway sends -------------------------------------------------------------------------


@pytest.mark.parametrize("who", RESTRICTED)
def test_the_restricted_readers_load_carries_read_restrictions_and_no_storage_access(
    lake: Lake, who: str
) -> None:
    session = lake.gateway.session(lake.gateway.token(lake.keys[who]))
    session.headers["X-Iceberg-Access-Delegation"] = "vended-credentials,remote-signing"
    loaded = session.get(lake.gateway.catalog_url("namespaces/sales/tables/orders"), timeout=TIMEOUT)
    assert loaded.status_code == 200, loaded.text
    body = loaded.json()
    assert body["read-restrictions"] == READ_RESTRICTIONS[who]
    assert body.get("config", {}) == {}  # no keys, no signer, not even the endpoint
    assert "storage-credentials" not in body
    control = lake.gateway.session(lake.gateway.token(lake.keys["ann"]))
    control.headers["X-Iceberg-Access-Delegation"] = "vended-credentials"
    unrestricted = control.get(lake.gateway.catalog_url("namespaces/sales/tables/orders"), timeout=TIMEOUT)
    assert "read-restrictions" not in unrestricted.json()
    assert unrestricted.json()["config"]["s3.access-key-id"].startswith("ASIA")


# -- pyiceberg 0.12 ---------------------------------------------------------------------------------


def test_pyiceberg_reads_everything_for_the_unrestricted_reader(lake: Lake) -> None:
    table = lake.catalog("ann", "lake").load_table("sales.orders")
    assert table.io.properties["s3.access-key-id"].startswith("ASIA")
    assert _arrow_rows(table.scan().to_arrow()) == ROWS


@pytest.mark.parametrize("who", RESTRICTED)
def test_pyiceberg_loads_the_restricted_table_and_cannot_read_it(lake: Lake, who: str) -> None:
    table = lake.catalog(who, "lake").load_table("sales.orders")
    # The extra field is tolerated and dropped: the schema shows the hidden/masked column as is.
    assert [f.name for f in table.schema().fields] == COLUMNS
    assert not any(
        k.startswith(("s3.access-key-id", "s3.session-token", "s3.signer")) for k in table.io.properties
    )
    # moto answers an unsigned request with 500 (S3 itself: 403 AccessDenied); either way no rows.
    _refused_read(
        lambda: table.scan().to_arrow(), OSError, "in bucket 'cedarberg-lake': AWS Error", "during HeadObject"
    )


@pytest.mark.parametrize("who", RESTRICTED)
def test_pyiceberg_with_storage_access_of_its_own_ignores_the_restrictions(lake: Lake, who: str) -> None:
    table = lake.catalog(who, "local").load_table("sales.orders")
    # Every row, every column, the email unmasked: pyiceberg has no code for read-restrictions.
    assert _arrow_rows(table.scan().to_arrow()) == ROWS


def test_pyiceberg_server_side_planning_plans_only_what_the_reader_may_see(lake: Lake) -> None:
    server = {"scan-planning-mode": "server"}
    # With storage access (local): only the allowed columns of the allowed rows.
    eva = lake.catalog("eva", "local", **server).load_table("sales.orders")
    allowed = eva.scan(selected_fields=("id", "amount")).to_arrow()
    assert allowed.column_names == ["id", "amount"]
    assert _arrow_rows(allowed) == [(1, 10.0), (3, 30.0)]
    with pytest.raises(ForbiddenError, match="email"):
        eva.scan(selected_fields=("id", "email")).to_arrow()
    masked = lake.catalog("max", "local", **server).load_table("sales.orders")
    assert _arrow_rows(masked.scan(selected_fields=("id", "region")).to_arrow()) == [r[:2] for r in ROWS]
    with pytest.raises(ForbiddenError, match="email"):
        masked.scan(selected_fields=("id", "email")).to_arrow()  # plans hand out raw files

    # On S3 the plan is restricted too (the eu file only) and carries no credentials: the files
    # it names cannot be read without a trusted engine.
    on_s3 = lake.catalog("eva", "lake", **server).load_table("sales.orders")
    tasks = list(on_s3.scan(selected_fields=("id", "amount")).plan_files())
    assert [task.file.partition[0] for task in tasks] == ["eu"]
    _refused_read(
        lambda: on_s3.scan(selected_fields=("id", "amount")).to_arrow(),
        OSError,
        "/data/region=eu/",  # the planned file, refused
        "AWS Error",
    )


# -- DuckDB 1.5.5 -----------------------------------------------------------------------------------


@pytest.mark.duckdb
def test_duckdb_reads_everything_for_the_unrestricted_reader(lake: Lake) -> None:
    con = lake.duckdb("ann", "lake")
    try:
        assert _sorted(con.execute("SELECT * FROM cat.sales.orders").fetchall()) == ROWS
    finally:
        con.close()


@pytest.mark.duckdb
@pytest.mark.parametrize("who", RESTRICTED)
def test_duckdb_loads_the_restricted_table_and_cannot_read_it(lake: Lake, who: str) -> None:
    con = lake.duckdb(who, "lake")
    mark = lake.audit_mark()
    try:
        # DuckDB binds the table by reading its manifest list from storage: the bind fails too.
        _refused_read(
            lambda: con.execute("SELECT * FROM cat.sales.orders").fetchall(),
            duckdb.HTTPException,
            f"HTTP GET error reading '{lake.s3.url}/cedarberg-lake/lake/sales/orders-",
        )
    finally:
        con.close()
    assert lake.loads_allowed(who, mark) >= 1  # the catalog answered the load


@pytest.mark.duckdb
@pytest.mark.parametrize("who", RESTRICTED)
def test_duckdb_with_storage_access_of_its_own_ignores_the_restrictions(lake: Lake, who: str) -> None:
    con = lake.duckdb(who, "local")
    try:
        assert [c[0] for c in con.execute("DESCRIBE cat.sales.orders").fetchall()] == COLUMNS
        assert _sorted(con.execute("SELECT * FROM cat.sales.orders").fetchall()) == ROWS
    finally:
        con.close()


# -- Spark 3.5.9 + Iceberg 1.10.2 ---------------------------------------------------------------------

# The runtime jar carries Iceberg's S3FileIO but not the AWS SDK it needs (iceberg-aws-bundle), nor
# does PySpark carry hadoop-aws: ResolvingFileIO falls back to HadoopFileIO, which has no file
# system for s3://. So Spark reads no S3 table here, restricted or not; on S3 its restricted
# readers rest on the gateway refusing credentials (tests/e2e/test_trusted_engines.py).
SPARK_NO_S3 = "Failed to get file system for path: s3://cedarberg-lake/"


def _spark_catalog(lake: Lake, spark: SparkSession, who: str, warehouse: str) -> str:
    credential = lake.gateway.credential(lake.keys[who])
    return lake.gateway.add_spark_catalog(
        spark, f"rr_{who}_{warehouse}", credential=credential, warehouse=warehouse
    )


@pytest.mark.spark
def test_spark_loads_restricted_tables_ignores_the_restrictions_and_has_no_s3_client(
    lake: Lake, spark: SparkSession
) -> None:
    for who in ("ann", *RESTRICTED):
        name = _spark_catalog(lake, spark, who, "lake")
        mark = lake.audit_mark()
        described = [row[0] for row in spark.sql(f"DESCRIBE {name}.sales.orders").collect()]
        assert described[: len(COLUMNS)] == COLUMNS  # the load succeeds; nothing hidden
        assert lake.loads_allowed(who, mark) >= 1
        _refused_read(
            lambda name=name: spark.sql(f"SELECT * FROM {name}.sales.orders").collect(),
            Exception,
            "RuntimeIOException",
            SPARK_NO_S3,
        )
    # With storage access of its own, every row and column, unmasked, for everyone.
    for who in ("ann", *RESTRICTED):
        name = _spark_catalog(lake, spark, who, "local")
        assert _sorted(spark.sql(f"SELECT * FROM {name}.sales.orders").collect()) == ROWS


# -- ClickHouse 26.9 (chdb 4.4.0) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def clickhouse(lake: Lake) -> Iterator[ClickHouse]:
    """chdb with one DataLakeCatalog database per reader of warehouse `lake`: `ann` with static S3
    keys (the configuration verified in test_clickhouse.py), `eva`/`max` relying on vending, and
    `eva_keys`: `eva` with static S3 keys, i.e. storage access of its own."""
    ch = ClickHouse(env={"SSL_CERT_FILE": str(lake.pki.ca_cert), "AWS_EC2_METADATA_DISABLED": "true"})
    try:
        for database, who, static_keys in (
            ("ann", "ann", True),
            ("eva", "eva", False),
            ("max", "max", False),
            ("eva_keys", "eva", True),
        ):
            client_id, secret = split_key(lake.keys[who])
            keys = f", '{lake.s3.access_key_id}', '{lake.s3.secret_access_key}'" if static_keys else ""
            ch.execute(
                f"CREATE DATABASE {database} ENGINE = DataLakeCatalog('{lake.gateway.url}/v1'{keys}) "
                f"SETTINGS catalog_type = 'rest', warehouse = 'lake', "
                f"catalog_credential = '{client_id}:{secret}', "
                f"oauth_server_uri = '{lake.gateway.token_url}', auth_scope = 'catalog', "
                f"storage_endpoint = '{lake.s3.url}/{lake.s3.bucket}', region = '{REGION}', "
                f"vended_credentials = {'false' if static_keys else 'true'}"
            )
        yield ch
    finally:
        ch.close()


def _clickhouse_rows(ch: ClickHouse, database: str) -> list[tuple[Any, ...]]:
    rows = ch.query(f"SELECT id, region, email, amount FROM {database}.`sales.orders`")
    return _sorted([(r[0], r[1], r[2], float(r[3])) for r in rows])


@pytest.mark.clickhouse
def test_clickhouse_reads_everything_for_the_unrestricted_reader(lake: Lake, clickhouse: ClickHouse) -> None:
    assert _clickhouse_rows(clickhouse, "ann") == ROWS


@pytest.mark.clickhouse
@pytest.mark.parametrize("who", RESTRICTED)
def test_clickhouse_cannot_read_the_restricted_tables_metadata_or_data(
    lake: Lake, clickhouse: ClickHouse, who: str
) -> None:
    mark = lake.audit_mark()
    # ClickHouse reads the metadata file at metadata-location from storage itself: with no
    # credentials that first read fails (moto answers the unsigned HEAD with 500), before any row.
    for statement in (f"DESCRIBE TABLE {who}.`sales.orders`", f"SELECT * FROM {who}.`sales.orders`"):
        _refused_read(
            lambda statement=statement: clickhouse.query(statement),
            ClickHouseError,
            "Failed to get object info",
            "(S3_ERROR)",
        )
    assert lake.loads_allowed(who, mark) >= 1  # the catalog answered the load


@pytest.mark.clickhouse
def test_clickhouse_with_storage_access_of_its_own_ignores_the_restrictions(clickhouse: ClickHouse) -> None:
    assert _clickhouse_rows(clickhouse, "eva_keys") == ROWS
