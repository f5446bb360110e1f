"""Fixtures shared by all tests: gateway processes, PostgreSQL, Spark, DuckDB, pyiceberg.

One behaviour suite on both stores (as pyiceberg runs one catalog suite over its back-ends).
The rule: a test is a *store behaviour test* when it lives in ``STORE_BEHAVIOUR`` (the catalog
below the gateway, the gateway's own suites, and the end-to-end modules that drive the catalog
through the REST API without an engine) **and** gets its store from a shared store fixture:
``gateway`` (a process), ``module_store_url`` / ``fresh_store_url`` (for a module's own gateway
fixture), ``template`` / ``make_gateway`` / ``gw`` (the in-process application,
tests/gateway/web) or ``registry_url`` (a `Store` below the gateway). Such a test runs once per
store, ids ``store-sqlite`` and ``store-postgres`` (``pytest_generate_tests`` parametrizes the
``store_kind`` fixture they all depend on). Tests that need no store (parsing, CLI help, policy
evaluation) use none of these fixtures and run once; engine modules (Spark, Trino, DuckDB,
ClickHouse, Java clients) test the engines' interoperability and run on SQLite; tests that pick
their stores themselves take ``store_url`` / ``store_gateway`` / ``catalog_gateway``. Whatever
differs between the two stores is a bug in one of them. PostgreSQL databases are clones of one
migrated template (``PostgresServer.migrated_database``), so a test pays no migration. A gateway,
catalog or offline ``keys create`` a store behaviour module starts names its store (``store_url=``
/ ``url=``) from these fixtures; tests/test_store_suite.py checks it, and lists the few tests that
are SQLite-only by construction (a SQLite lock, process lifecycle, a SQLite file's upgrade).

- ``gateway``: a fresh gateway per test, on ``store_kind``'s store (SQLite outside
  ``STORE_BEHAVIOUR``).
- ``registry_url``: the URL of a fresh registry (migrated on PostgreSQL) on ``store_kind``'s store.
- ``module_store_url`` (module): the store of a gateway a behaviour module shares (``None``: SQLite);
  ``second_module_store_url`` for a second such gateway; ``fresh_store_url`` for a gateway one test
  starts itself, ``second_fresh_store_url`` for a second one.
- ``store_gateway``: the same on each store: ``store-sqlite`` and ``store-postgres``.
- ``catalog_gateway``: the same on each store (``store-sqlite``, ``store-postgres``, both with the
  local KEK) and on SQLite with each remote KEK provider (``kms-aws``, ``kms-vault``, ``kms-gcp``,
  ``kms-azure``: moto, OpenBao, and the GCP / Azure wire-protocol servers, one each per session).
- ``store_url``: just the store (``None`` = embedded SQLite), for tests running several gateways.
- ``postgres_server`` (session) / ``postgres_url`` (a fresh, empty database per test).
- ``session_gateway`` (session): one SQLite gateway shared by the engine tests.
- ``spark`` (session): a SparkSession whose catalog ``cat`` is ``session_gateway``.
- ``duckdb_conn``: DuckDB with ``session_gateway`` attached as ``cat``.
- ``make_catalog`` (alias ``pyiceberg_catalog``): ``make_catalog(gateway, **props) -> RestCatalog``.
- ``trino`` (session): one Trino 476 coordinator trusting ``session_pki``; modules add catalogs
  (``trino.create_catalog``) pointing at their own gateways.

Tests using ``spark``, ``duckdb_conn`` or PostgreSQL get the matching marker automatically, so
``-m "not spark"`` and friends work without each test repeating the marker.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import kms_servers, postgres
from tests.support.engines import duckdb_attach, duckdb_connect, spark_session
from tests.support.engines import make_catalog as _make_catalog
from tests.support.gateway import GatewayProcess
from tests.support.tls import TestPki, make_pki
from tests.support.trino import TrinoServer

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import SparkSession

_FAILED = pytest.StashKey[bool]()
_AUTO_MARKERS = {
    "spark": "spark",
    "duckdb_conn": "duckdb",
    "postgres_server": "postgres",
    "postgres_url": "postgres",
    "trino": "trino",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in _AUTO_MARKERS.items():
            if fixture in names and item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


def _print_log_if_failed(request: pytest.FixtureRequest, gateway: GatewayProcess) -> None:
    """Show the end of the gateway log under "Captured stdout teardown" of a failed test."""
    if request.node.stash.get(_FAILED, False):
        print(f"--- gateway log {gateway.log_path} (tail) ---")
        print(gateway.log_text()[-8000:])


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """The private PostgreSQL 15 server, started once per test session."""
    server = postgres.get_server()
    yield server
    postgres.stop_server()


@pytest.fixture
def postgres_url(postgres_server: postgres.PostgresServer) -> str:
    """URL of a fresh, empty PostgreSQL database."""
    return postgres_server.create_database()


# -- one behaviour suite on both stores ------------------------------------------------------

# Where store behaviour tests live (paths relative to tests/, a directory ends in "/"); see the
# module docstring for the rule.
STORE_BEHAVIOUR = (
    "catalog/",
    "gateway/",
    "e2e/test_load_read_restrictions.py",
    "e2e/test_principal_namespaces.py",
    "e2e/test_scan_planning.py",
    "e2e/test_scan_restrictions.py",
    "e2e/test_sealing.py",
)
# Fixtures that pick their stores themselves: a test using one is already parametrized.
_CHOOSES_ITS_STORES = {"store_url", "store_gateway", "catalog_gateway"}
_TESTS_DIR = Path(__file__).resolve().parent
STORES = [
    pytest.param("sqlite", id="store-sqlite"),
    pytest.param("postgres", id="store-postgres", marks=pytest.mark.postgres),
]


def is_store_behaviour(path: Path) -> bool:
    """Whether the test module at `path` is in ``STORE_BEHAVIOUR``."""
    try:
        relative = path.resolve().relative_to(_TESTS_DIR).as_posix()
    except ValueError:
        return False
    return any(
        relative.startswith(entry) if entry.endswith("/") else relative == entry for entry in STORE_BEHAVIOUR
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    if (
        "store_kind" in names
        and not names & _CHOOSES_ITS_STORES
        and is_store_behaviour(Path(str(metafunc.definition.path)))
    ):
        # Module scope: the SQLite half of a module runs before its PostgreSQL half, and a module's
        # shared gateway (`module_store_url`) is made once per store.
        metafunc.parametrize("store_kind", STORES, indirect=True, scope="module")


@pytest.fixture(scope="module")
def store_kind(request: pytest.FixtureRequest) -> str:
    """``"sqlite"`` or ``"postgres"``: the store of this run of a store behaviour test (SQLite for
    tests outside ``STORE_BEHAVIOUR``)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def registry_url(request: pytest.FixtureRequest, store_kind: str, tmp_path: Path) -> Iterator[str]:
    """A fresh registry for `open_store` on ``store_kind``'s store: a SQLite file in ``tmp_path``
    (created by the first `open_store`) or a PostgreSQL database already at schema head (dropped
    after the test)."""
    for url in _gateway_store(request, store_kind):
        yield url or f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}"


def _gateway_store(request: pytest.FixtureRequest, store_kind: str) -> Iterator[str | None]:
    """``None`` (SQLite in the gateway's data directory) or a fresh PostgreSQL database already at
    schema head, dropped when the fixture ends."""
    if store_kind != "postgres":
        yield None
        return
    server: postgres.PostgresServer = request.getfixturevalue("postgres_server")
    url = server.migrated_database()
    yield url
    server.drop_database(postgres.database_name(url))


@pytest.fixture(scope="module")
def module_store_url(request: pytest.FixtureRequest, store_kind: str) -> Iterator[str | None]:
    """The store of a gateway a store behaviour module shares between its tests."""
    yield from _gateway_store(request, store_kind)


@pytest.fixture(scope="module")
def second_module_store_url(request: pytest.FixtureRequest, store_kind: str) -> Iterator[str | None]:
    """The store of a second gateway a store behaviour module shares (its own database)."""
    yield from _gateway_store(request, store_kind)


@pytest.fixture
def fresh_store_url(request: pytest.FixtureRequest, store_kind: str) -> Iterator[str | None]:
    """The store of a gateway one test of a store behaviour module starts itself."""
    yield from _gateway_store(request, store_kind)


@pytest.fixture
def second_fresh_store_url(request: pytest.FixtureRequest, store_kind: str) -> Iterator[str | None]:
    """The store of a second gateway one test starts itself (its own database)."""
    yield from _gateway_store(request, store_kind)


# -- gateways ----------------------------------------------------------------------------------


@pytest.fixture
def gateway(request: pytest.FixtureRequest, store_kind: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A fresh gateway on embedded defaults (local warehouse) in ``tmp_path``, on ``store_kind``'s
    store (SQLite in the data directory, or a fresh PostgreSQL database)."""
    url: str | None = request.getfixturevalue("fresh_store_url")
    with GatewayProcess(tmp_path / "gateway", store_url=url) as gw:
        yield gw
        _print_log_if_failed(request, gw)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="store-sqlite"),
        pytest.param("postgres", id="store-postgres", marks=pytest.mark.postgres),
    ]
)
def store_url(request: pytest.FixtureRequest) -> str | None:
    """The catalog store to test on: ``None`` (embedded SQLite) or a fresh PostgreSQL database."""
    if request.param == "postgres":
        server: postgres.PostgresServer = request.getfixturevalue("postgres_server")
        return server.migrated_database()
    return None


@pytest.fixture(scope="session")
def openbao() -> Iterator[kms_servers.OpenBaoServer]:
    with kms_servers.openbao_server() as server:
        yield server


@pytest.fixture(scope="session")
def moto_kms() -> Iterator[kms_servers.MotoKmsServer]:
    with kms_servers.moto_kms_server() as server:
        yield server


@pytest.fixture(scope="session")
def gcp_kms() -> Iterator[kms_servers.GcpKmsFake]:
    with kms_servers.gcp_kms_fake() as server:
        yield server


@pytest.fixture(scope="session")
def azure_kv(session_pki: TestPki) -> Iterator[kms_servers.AzureKeyVaultFake]:
    with kms_servers.azure_kv_fake(session_pki) as server:
        yield server


_KMS_FIXTURES = {"aws": "moto_kms", "vault": "openbao", "gcp": "gcp_kms", "azure": "azure_kv"}


@pytest.fixture(
    params=[
        pytest.param(("sqlite", "local"), id="store-sqlite"),
        pytest.param(("postgres", "local"), id="store-postgres", marks=pytest.mark.postgres),
        *(pytest.param(("sqlite", kms), id=f"kms-{kms}") for kms in _KMS_FIXTURES),
    ]
)
def catalog_gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A fresh gateway on a fresh store, per store and KEK provider (see the module docstring)."""
    store, kms = request.param
    url = None
    if store == "postgres":
        url = request.getfixturevalue("postgres_server").migrated_database()
    config = {}
    if kms != "local":
        config["kms"] = request.getfixturevalue(_KMS_FIXTURES[kms]).kms_config
    with GatewayProcess(tmp_path / "gateway", store_url=url, config=config) as gw:
        yield gw
        _print_log_if_failed(request, gw)


@pytest.fixture
def store_gateway(
    request: pytest.FixtureRequest, store_url: str | None, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A fresh gateway on a fresh store, once per store (ids ``store-sqlite``, ``store-postgres``)."""
    with GatewayProcess(tmp_path / "gateway", store_url=store_url) as gw:
        yield gw
        _print_log_if_failed(request, gw)


@pytest.fixture(scope="session")
def session_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One SQLite gateway shared by the engine (Spark/DuckDB) tests; use unique namespaces.

    Warehouse ``default`` seals its metadata files (drops are purged by the gateway at once);
    warehouse ``plain`` writes plain metadata files, as engines write them themselves."""
    data_dir = tmp_path_factory.mktemp("session-gateway") / "gateway"
    config = {
        "warehouses": {
            "default": {"location": (data_dir / "warehouse").as_uri(), "drop_retention_seconds": 0},
            "plain": {"location": (data_dir / "plain").as_uri(), "seal_metadata_files": False},
        }
    }
    with GatewayProcess(data_dir, config=config) as gw:
        yield gw


# -- engines -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def session_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """One CA and server certificate per test session; the ``spark`` JVM trusts this CA, so TLS
    gateways that Spark talks to must serve this certificate."""
    return make_pki(tmp_path_factory.mktemp("session-pki"))


@pytest.fixture(scope="session")
def spark(
    session_gateway: GatewayProcess, session_pki: TestPki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkSession]:
    """A local SparkSession; catalog ``cat`` is the REST catalog at ``session_gateway``.

    Catalog ``plain`` is the same gateway's unsealed warehouse ``plain``.
    Catalog caching is off so that Spark sees commits made by other clients at once. The driver
    JVM trusts ``session_pki``'s CA (a truststore can only be set when the session starts).
    """
    session = spark_session(
        {
            "cat": {"uri": session_gateway.url, "cache-enabled": "false"},
            "plain": {"uri": session_gateway.url, "warehouse": "plain", "cache-enabled": "false"},
        },
        local_dir=tmp_path_factory.mktemp("spark"),
        extra_java_options=session_pki.java_options(),
    )
    yield session
    session.stop()


@pytest.fixture
def duckdb_conn(session_gateway: GatewayProcess) -> Iterator[duckdb.DuckDBPyConnection]:
    """DuckDB (iceberg, httpfs, avro loaded from the installed packages) with ``session_gateway``
    attached, unauthenticated, as ``cat``."""
    con = duckdb_connect()
    try:
        duckdb_attach(con, session_gateway.url, alias="cat")
        yield con
    finally:
        con.close()


@pytest.fixture
def make_catalog() -> Callable[..., Any]:
    """Factory: ``make_catalog(gateway_or_url, name="cedarberg", **props) -> RestCatalog``."""
    return _make_catalog


@pytest.fixture
def pyiceberg_catalog() -> Callable[..., Any]:
    """Alias of ``make_catalog``."""
    return _make_catalog


@pytest.fixture(scope="session")
def trino(session_pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrinoServer]:
    """One Trino coordinator (Iceberg connector only, 1 GB heap) for the session; its JVM trusts
    ``session_pki``'s CA, so TLS gateways it talks to must serve that CA's certificate."""
    with TrinoServer(
        tmp_path_factory.mktemp("trino"), java_options=session_pki.java_options().split()
    ) as server:
        yield server
