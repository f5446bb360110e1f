"""Real clients against a production-shaped gateway: TLS, credentials required, Cedar grants.

One gateway per module (``SecureGateway``: TLS with the session CA, no anonymous access, an admin
key bootstrapped with ``cedarberg keys create``). The admin creates, per engine, a namespace
``<engine>_sales`` granting ``cedarberg.writers = etl`` and ``cedarberg.readers = analysts``, and a
namespace ``vault`` (with a table) granted to neither. Then, for Spark (``credential=id:secret``
and ``token=``), pyiceberg (``credential``) and DuckDB (an iceberg secret with client id/secret):

- the writer (group ``etl``) creates a table, inserts and reads in its namespace;
- the reader (group ``analysts``) reads it, and its writes are refused with the engine's
  Forbidden error, leaving the table as it was;
- ``vault`` is invisible to both: not listed, and loading it or its table says "no such ...".

Plus, over HTTPS: no credentials -> 401, a wrong secret -> 401, and nothing changes; and at the
end, no key or token handed out in this module appears in the gateway log.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import (
    ForbiddenError,
    NoSuchNamespaceError,
    NoSuchTableError,
    OAuthError,
)
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.support.secure import AMBIENT_CA_VARIABLES, HTTP_TIMEOUT, SecureGateway, split_key

if TYPE_CHECKING:
    import duckdb
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession

    from tests.support.tls import TestPki

WRITERS = "etl"
READERS = "analysts"
VAULT = "vault"
VAULT_TABLE = "ledger"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def arrow_rows(*ids: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "name": f"n{i}"} for i in ids], schema=ARROW_SCHEMA)


def ids_of(catalog: RestCatalog, identifier: tuple[str, ...]) -> list[int]:
    return sorted(catalog.load_table(identifier).scan().to_arrow().column("id").to_pylist())


def snapshot_count(catalog: RestCatalog, identifier: tuple[str, ...]) -> int:
    return len(catalog.load_table(identifier).snapshots())


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _only_the_configured_ca() -> Iterator[None]:
    """requests (under pyiceberg) would let REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace the
    catalog's ``ssl.cabundle`` (psf/requests#3829): clients here trust only what they are told."""
    with pytest.MonkeyPatch.context() as env:
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        yield


@pytest.fixture(scope="module")
def secure(
    request: pytest.FixtureRequest, session_pki: TestPki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureGateway]:
    """The module's gateway: TLS with the session CA (which the shared Spark JVM trusts)."""
    # The access log on: the secrets check at the end then also covers a line per request.
    gw = SecureGateway(
        tmp_path_factory.mktemp("secure-clients"), pki=session_pki, config={"access_log": True}
    )
    failed_before = request.session.testsfailed
    with gw:
        for engine in ("spark", "pyi", "duck"):
            gw.create_namespace(f"{engine}_sales", readers=[READERS], writers=[WRITERS])
        gw.create_namespace(VAULT, readers=["auditors"], writers=["treasury"])
        admin = gw.admin_catalog()
        admin.create_table((VAULT, VAULT_TABLE), schema=SCHEMA).append(arrow_rows(1, 2))
        admin.close()
        yield gw
        if request.session.testsfailed > failed_before:
            print(f"--- secure gateway log {gw.process.log_path} (tail) ---")
            print(gw.log_text()[-8000:])


@pytest.fixture(scope="module")
def writer_key(secure: SecureGateway) -> str:
    return secure.create_key("etl-bot", [WRITERS])


@pytest.fixture(scope="module")
def reader_key(secure: SecureGateway) -> str:
    return secure.create_key("analyst", [READERS])


@pytest.fixture
def admin_catalog(secure: SecureGateway) -> Iterator[RestCatalog]:
    catalog = secure.admin_catalog()
    yield catalog
    catalog.close()


# -- HTTP: no credentials, wrong secrets -----------------------------------------------------------


def test_requests_without_credentials_are_401(secure: SecureGateway) -> None:
    anonymous = secure.session()
    probes = [
        ("GET", f"{secure.url}/v1/config", None),
        ("GET", secure.catalog_url("namespaces"), None),
        ("POST", secure.catalog_url("namespaces"), {"namespace": ["sneaky"], "properties": {}}),
        ("GET", secure.catalog_url(f"namespaces/{VAULT}/tables/{VAULT_TABLE}"), None),
        ("GET", f"{secure.url}/admin/v1/api-keys", None),
        (
            "POST",
            f"{secure.url}/admin/v1/api-keys",
            {"principal": "x", "kind": "service", "groups": ["admins"]},
        ),
    ]
    for method, url, body in probes:
        response = anonymous.request(method, url, json=body, timeout=HTTP_TIMEOUT)
        assert response.status_code == 401, (method, url, response.status_code, response.text)
        assert response.headers.get("WWW-Authenticate", "").lower().startswith("bearer"), response.headers
        error = response.json()["error"]
        assert error["code"] == 401, error
    listed = secure.admin.get(secure.catalog_url("namespaces"), timeout=HTTP_TIMEOUT)
    assert ["sneaky"] not in listed.json()["namespaces"]
    keys = secure.admin.get(f"{secure.url}/admin/v1/api-keys", timeout=HTTP_TIMEOUT)
    assert keys.status_code == 200, keys.text
    assert "x" not in {k["principal"] for k in keys.json()["api-keys"]}


def test_wrong_secret_is_401_and_changes_nothing(secure: SecureGateway) -> None:
    key = secure.create_key("etl-victim", [WRITERS])
    client_id, secret = split_key(key)
    wrong = secret[:-2] + ("AA" if not secret.endswith("AA") else "BA")
    wrong_key = f"cbk_{client_id}_{wrong}"
    anonymous = secure.session()

    # The token endpoint, as Spark (form body) and DuckDB (HTTP Basic) send client credentials.
    form = anonymous.post(
        secure.token_url,
        data={"grant_type": "client_credentials", "client_id": client_id, "client_secret": wrong},
        timeout=HTTP_TIMEOUT,
    )
    assert form.status_code == 401, form.text
    assert form.json()["error"] == "invalid_client"
    assert "access_token" not in form.json()
    basic = anonymous.post(
        secure.token_url,
        data={"grant_type": "client_credentials"},
        headers={"Authorization": "Basic " + base64.b64encode(f"{client_id}:{wrong}".encode()).decode()},
        timeout=HTTP_TIMEOUT,
    )
    assert basic.status_code == 401, basic.text
    assert basic.json()["error"] == "invalid_client"

    # The key itself, with a wrong secret, as a bearer token and as X-Api-Key: nothing is created.
    create_table = anonymous.post(
        secure.catalog_url("namespaces/pyi_sales/tables"),
        json={"name": "intruder", "schema": {"type": "struct", "schema-id": 0, "fields": []}},
        headers={"Authorization": f"Bearer {wrong_key}"},
        timeout=HTTP_TIMEOUT,
    )
    assert create_table.status_code == 401, create_table.text
    assert wrong not in create_table.text
    create_namespace = anonymous.post(
        secure.catalog_url("namespaces"),
        json={"namespace": ["intruder"], "properties": {}},
        headers={"X-Api-Key": wrong_key},
        timeout=HTTP_TIMEOUT,
    )
    assert create_namespace.status_code == 401, create_namespace.text

    table = secure.admin.get(secure.catalog_url("namespaces/pyi_sales/tables/intruder"), timeout=HTTP_TIMEOUT)
    assert table.status_code == 404, table.text
    namespace = secure.admin.get(secure.catalog_url("namespaces/intruder"), timeout=HTTP_TIMEOUT)
    assert namespace.status_code == 404, namespace.text

    # The right secret still works (four failures stay under the lock-out threshold).
    assert secure.token(key).count(".") == 2  # a JWT


# -- Spark -----------------------------------------------------------------------------------------


def spark_rows(spark: SparkSession, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(sql).collect()]


def java_error(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return f"{type(excinfo.value).__name__}: {excinfo.value}"


def assert_spark_vault_hidden(spark: SparkSession, catalog: str) -> None:
    namespaces = {row[0] for row in spark_rows(spark, f"SHOW NAMESPACES IN {catalog}")}
    assert "spark_sales" in namespaces
    assert VAULT not in namespaces
    with pytest.raises(Exception, match=r"TABLE_OR_VIEW_NOT_FOUND") as excinfo:
        spark.table(f"{catalog}.{VAULT}.{VAULT_TABLE}").collect()
    assert "Forbidden" not in java_error(excinfo)
    with pytest.raises(Exception, match=r"SCHEMA_NOT_FOUND|NoSuchNamespace") as excinfo:
        spark.sql(f"SHOW TABLES IN {catalog}.{VAULT}").collect()
    assert "Forbidden" not in java_error(excinfo)


def test_spark_credential_writer_and_reader(
    spark: SparkSession, secure: SecureGateway, writer_key: str, reader_key: str, admin_catalog: RestCatalog
) -> None:
    writer = secure.add_spark_catalog(spark, "sec_writer", credential=secure.credential(writer_key))
    table = f"{writer}.spark_sales.trips"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
    assert spark_rows(spark, f"SELECT id, name FROM {table} ORDER BY id") == [(1, "a"), (2, "b"), (3, "c")]
    assert_spark_vault_hidden(spark, writer)

    reader = secure.add_spark_catalog(spark, "sec_reader", credential=secure.credential(reader_key))
    readable = f"{reader}.spark_sales.trips"
    assert spark_rows(spark, f"SELECT id FROM {readable} ORDER BY id") == [(1,), (2,), (3,)]
    before = snapshot_count(admin_catalog, ("spark_sales", "trips"))
    with pytest.raises(Exception, match=r"ForbiddenException") as excinfo:
        spark.sql(f"INSERT INTO {readable} VALUES (4, 'd')")
    assert "NotAuthorized" not in java_error(excinfo)
    with pytest.raises(Exception, match=r"ForbiddenException"):
        spark.sql(f"CREATE TABLE {reader}.spark_sales.mine (id BIGINT) USING iceberg")
    assert snapshot_count(admin_catalog, ("spark_sales", "trips")) == before
    assert ids_of(admin_catalog, ("spark_sales", "trips")) == [1, 2, 3]
    assert not admin_catalog.table_exists(("spark_sales", "mine"))
    assert_spark_vault_hidden(spark, reader)


def test_spark_token_writer_and_reader(
    spark: SparkSession, secure: SecureGateway, writer_key: str, reader_key: str, admin_catalog: RestCatalog
) -> None:
    # token= a gateway JWT obtained with the writer's key ...
    writer = secure.add_spark_catalog(spark, "sec_token", token=secure.token(writer_key))
    table = f"{writer}.spark_sales.fares"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING iceberg PARTITIONED BY (name)")
    spark.sql(f"INSERT INTO {table} VALUES (10, 'x'), (11, 'y')")
    assert spark_rows(spark, f"SELECT id, name FROM {table} ORDER BY id") == [(10, "x"), (11, "y")]

    # ... and token= the reader's API key itself.
    reader = secure.add_spark_catalog(spark, "sec_token_reader", token=reader_key)
    assert spark_rows(spark, f"SELECT count(*) FROM {reader}.spark_sales.fares") == [(2,)]
    with pytest.raises(Exception, match=r"ForbiddenException"):
        spark.sql(f"DELETE FROM {reader}.spark_sales.fares WHERE id = 10")
    assert ids_of(admin_catalog, ("spark_sales", "fares")) == [10, 11]
    assert_spark_vault_hidden(spark, reader)


def test_spark_wrong_secret_is_refused(spark: SparkSession, secure: SecureGateway) -> None:
    client_id, _ = split_key(secure.create_key("spark-victim", [WRITERS]))
    wrong = "A" * 43
    catalog = secure.add_spark_catalog(spark, "sec_wrong", credential=f"{client_id}:{wrong}")
    with pytest.raises(Exception, match=r"NotAuthorizedException") as excinfo:
        spark.sql(f"CREATE NAMESPACE {catalog}.spark_intruder")
    assert wrong not in java_error(excinfo)
    missing = secure.admin.get(secure.catalog_url("namespaces/spark_intruder"), timeout=HTTP_TIMEOUT)
    assert missing.status_code == 404, missing.text


# -- pyiceberg -------------------------------------------------------------------------------------


def test_pyiceberg_credential_writer_and_reader(
    secure: SecureGateway, writer_key: str, reader_key: str, admin_catalog: RestCatalog
) -> None:
    writer = secure.catalog("pyi-writer", credential=secure.credential(writer_key))
    reader = secure.catalog("pyi-reader", credential=secure.credential(reader_key))
    try:
        created = writer.create_table(("pyi_sales", "orders"), schema=SCHEMA)
        created.append(arrow_rows(1, 2))
        writer.load_table(("pyi_sales", "orders")).append(arrow_rows(3))
        assert ids_of(writer, ("pyi_sales", "orders")) == [1, 2, 3]
        # The grant covers namespaces below the granted one.
        admin_catalog.create_namespace(("pyi_sales", "eu"))
        writer.create_table(("pyi_sales", "eu", "returns"), schema=SCHEMA).append(arrow_rows(7))
        assert ids_of(writer, ("pyi_sales", "eu", "returns")) == [7]

        assert ids_of(reader, ("pyi_sales", "orders")) == [1, 2, 3]
        assert ids_of(reader, ("pyi_sales", "eu", "returns")) == [7]
        assert reader.list_tables("pyi_sales") == [("pyi_sales", "orders")]
        before = snapshot_count(admin_catalog, ("pyi_sales", "orders"))
        with pytest.raises(ForbiddenError):
            reader.load_table(("pyi_sales", "orders")).append(arrow_rows(4))
        with pytest.raises(ForbiddenError):
            reader.create_table(("pyi_sales", "mine"), schema=SCHEMA)
        with pytest.raises(ForbiddenError):
            reader.drop_table(("pyi_sales", "orders"))
        with pytest.raises(ForbiddenError):
            reader.update_namespace_properties("pyi_sales", updates={"cedarberg.writers": READERS})
        assert snapshot_count(admin_catalog, ("pyi_sales", "orders")) == before
        assert ids_of(admin_catalog, ("pyi_sales", "orders")) == [1, 2, 3]
        assert not admin_catalog.table_exists(("pyi_sales", "mine"))
        assert admin_catalog.load_namespace_properties("pyi_sales")["cedarberg.writers"] == WRITERS

        for catalog in (writer, reader):
            listed = catalog.list_namespaces()
            assert ("pyi_sales",) in listed
            assert (VAULT,) not in listed
            with pytest.raises(NoSuchTableError):
                catalog.load_table((VAULT, VAULT_TABLE))
            assert not catalog.table_exists((VAULT, VAULT_TABLE))
            with pytest.raises(NoSuchNamespaceError):
                catalog.load_namespace_properties(VAULT)
            with pytest.raises(NoSuchNamespaceError):
                catalog.list_tables(VAULT)
            with pytest.raises(NoSuchNamespaceError):
                catalog.create_table((VAULT, "planted"), schema=SCHEMA)
        assert ids_of(admin_catalog, (VAULT, VAULT_TABLE)) == [1, 2]
        assert admin_catalog.list_tables(VAULT) == [(VAULT, VAULT_TABLE)]
    finally:
        writer.close()
        reader.close()


def test_pyiceberg_wrong_secret_is_refused(secure: SecureGateway) -> None:
    client_id, _ = split_key(secure.create_key("pyi-victim", [WRITERS]))
    with pytest.raises(OAuthError, match="invalid_client"):
        secure.catalog("pyi-wrong", credential=f"{client_id}:{'B' * 43}")


def test_pyiceberg_needs_the_ca(secure: SecureGateway, reader_key: str) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    with pytest.raises(requests.exceptions.SSLError):
        RestCatalog("untrusting", uri=secure.url, token=reader_key)


# -- DuckDB ----------------------------------------------------------------------------------------


def duck_rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in con.execute(sql).fetchall()]


def duck_schemas(con: duckdb.DuckDBPyConnection, alias: str) -> set[str]:
    return {
        row[0]
        for row in duck_rows(con, f"SELECT schema_name FROM duckdb_schemas() WHERE database_name = '{alias}'")
    }


@pytest.mark.duckdb
def test_duckdb_secret_writer_and_reader(
    secure: SecureGateway, writer_key: str, reader_key: str, admin_catalog: RestCatalog
) -> None:
    import duckdb

    writer = secure.duckdb(writer_key, alias="w")
    reader = secure.duckdb(reader_key, alias="r")
    try:
        writer.execute("CREATE TABLE w.duck_sales.items (id BIGINT, name VARCHAR)")
        writer.execute("INSERT INTO w.duck_sales.items VALUES (1, 'a'), (2, 'b')")
        writer.execute("INSERT INTO w.duck_sales.items VALUES (3, 'c')")
        assert duck_rows(writer, "SELECT id, name FROM w.duck_sales.items ORDER BY id") == [
            (1, "a"),
            (2, "b"),
            (3, "c"),
        ]
        assert ids_of(admin_catalog, ("duck_sales", "items")) == [1, 2, 3]

        assert duck_rows(reader, "SELECT id FROM r.duck_sales.items ORDER BY id") == [(1,), (2,), (3,)]
        before = snapshot_count(admin_catalog, ("duck_sales", "items"))
        with pytest.raises(duckdb.Error, match=r"403|Forbidden"):
            reader.execute("INSERT INTO r.duck_sales.items VALUES (4, 'd')")
        with pytest.raises(duckdb.Error, match=r"403|Forbidden"):
            reader.execute("CREATE TABLE r.duck_sales.mine (id BIGINT)")
        with pytest.raises(duckdb.Error, match=r"403|Forbidden"):
            reader.execute("DROP TABLE r.duck_sales.items")
        assert snapshot_count(admin_catalog, ("duck_sales", "items")) == before
        assert ids_of(admin_catalog, ("duck_sales", "items")) == [1, 2, 3]
        assert not admin_catalog.table_exists(("duck_sales", "mine"))

        for con, alias in ((writer, "w"), (reader, "r")):
            schemas = duck_schemas(con, alias)
            assert "duck_sales" in schemas
            assert VAULT not in schemas
            with pytest.raises(duckdb.Error, match=r"(?i)does not exist|not found") as excinfo:
                con.execute(f"SELECT * FROM {alias}.{VAULT}.{VAULT_TABLE}")
            assert "403" not in str(excinfo.value)
            with pytest.raises(duckdb.Error, match=r"(?i)not found|does not exist"):
                con.execute(f"CREATE TABLE {alias}.{VAULT}.planted (id BIGINT)")
        assert admin_catalog.list_tables(VAULT) == [(VAULT, VAULT_TABLE)]
    finally:
        writer.close()
        reader.close()


@pytest.mark.duckdb
def test_duckdb_wrong_secret_is_refused(secure: SecureGateway) -> None:
    import duckdb

    from tests.support.secure import duckdb_secret

    client_id, _ = split_key(secure.create_key("duck-victim", [WRITERS]))
    con = secure.duckdb(None)
    try:
        with pytest.raises(duckdb.Error, match=r"401|invalid_client|Unauthorized") as excinfo:
            duckdb_secret(con, "bad", client_id, "C" * 43, secure.token_url)
        assert "C" * 43 not in str(excinfo.value)
    finally:
        con.close()


@pytest.mark.duckdb
def test_duckdb_needs_the_ca(secure: SecureGateway, reader_key: str) -> None:
    import duckdb

    with pytest.raises(duckdb.Error, match=r"(?i)ssl|certificate"):
        secure.duckdb(reader_key, alias="u", trust=False).close()


# -- last: the logs ----------------------------------------------------------------------------------


def test_no_key_or_token_in_the_gateway_log(secure: SecureGateway) -> None:
    log = secure.log_text()
    assert "NotAuthorizedException" in log or " 401 " in log  # the log did capture this module
    for secret in secure.issued_secrets:
        material = split_key(secret)[1] if secret.startswith("cbk_") else secret
        assert material not in log
        if not secret.startswith("cbk_"):
            assert secret.rsplit(".", 1)[-1] not in log  # not even a JWT's signature
