"""Clients of the gateway: a PySpark session, a DuckDB connection, a pyiceberg catalog."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession

    from tests.support.gateway import GatewayProcess

DUCKDB_EXTENSIONS = ("httpfs", "avro", "iceberg")
ICEBERG_SPARK_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


# -- pyiceberg ---------------------------------------------------------------------------------


def make_catalog(gateway: GatewayProcess | str, name: str = "cedarberg", **props: Any) -> RestCatalog:
    """A pyiceberg ``RestCatalog`` for ``gateway`` (a ``GatewayProcess`` or a base URL).

    ``props`` are catalog properties (``warehouse``, ``token``, ``credential``, ...);
    keyword-friendly spellings with ``_`` instead of ``-`` or ``.`` are not translated.
    """
    from pyiceberg.catalog.rest import RestCatalog

    uri = gateway if isinstance(gateway, str) else gateway.url
    if not isinstance(gateway, str) and gateway.anonymous and not {"token", "credential"} & set(props):
        # pyiceberg 0.12 sends "Authorization: Bearer None" when it has no token.
        props = {**props, "token": gateway.admin_key}
    properties = {"uri": uri, **{k: str(v) for k, v in props.items()}}
    return RestCatalog(name, **properties)


# -- Spark -------------------------------------------------------------------------------------


def iceberg_spark_runtime_jar() -> Path:
    """The Iceberg Spark 3.5 / Scala 2.12 runtime jar shipped by snowpark-connect-deps-iceberg."""
    import snowpark_connect_deps_iceberg

    jars = [Path(j) for j in snowpark_connect_deps_iceberg.list_jars()]
    for jar in jars:
        if jar.name.startswith("iceberg-spark-runtime-3.5_2.12-"):
            return jar
    raise RuntimeError(f"no iceberg-spark-runtime-3.5_2.12 jar among {jars}")


def spark_session(
    catalogs: Mapping[str, Mapping[str, str]],
    *,
    conf: Mapping[str, str] | None = None,
    app_name: str = "cedarberg-tests",
    local_dir: Path | None = None,
    extra_java_options: str | None = None,
) -> SparkSession:
    """Start (or reuse) the local SparkSession with one REST catalog per ``catalogs`` entry.

    ``catalogs`` maps a catalog name to its properties, e.g.
    ``{"cat": {"uri": "http://127.0.0.1:8181"}}``; ``type=rest`` is implied. Only one
    SparkContext can exist per process: the caller should share the session. ``local_dir``
    holds Spark's own scratch files (its session warehouse), which otherwise land in the cwd.
    ``extra_java_options`` go to ``spark.driver.extraJavaOptions`` (the driver JVM's flags, fixed
    when the session starts), e.g. a truststore: ``TestPki.java_options()``.
    """
    scratch = Path(local_dir) if local_dir else Path(tempfile.mkdtemp(prefix="cedarberg-spark-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep the driver on loopback
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars", str(iceberg_spark_runtime_jar()))
        .config("spark.sql.extensions", ICEBERG_SPARK_EXTENSIONS)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(scratch / "spark-warehouse"))
    )
    if extra_java_options:
        builder = builder.config("spark.driver.extraJavaOptions", extra_java_options)
    for catalog, props in catalogs.items():
        prefix = f"spark.sql.catalog.{catalog}"
        builder = builder.config(prefix, "org.apache.iceberg.spark.SparkCatalog")
        builder = builder.config(f"{prefix}.type", "rest")
        for key, value in props.items():
            builder = builder.config(f"{prefix}.{key}", value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


# -- DuckDB ------------------------------------------------------------------------------------


def duckdb_extension_path(name: str) -> Path:
    """Path of the ``name`` extension binary installed by the ``duckdb-extension-NAME`` package."""
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package duckdb-extension-{name} is not installed")
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise RuntimeError(f"{path} missing: duckdb-extension-{name} must match duckdb {duckdb.__version__}")
    return path


def duckdb_connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with httpfs, avro and iceberg loaded from local files
    (no extension is ever downloaded)."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in DUCKDB_EXTENSIONS:
        con.execute(f"LOAD '{duckdb_extension_path(name)}'")
    return con


def duckdb_attach(
    con: duckdb.DuckDBPyConnection,
    endpoint: str,
    *,
    alias: str = "cat",
    warehouse: str = "default",
    **options: str,
) -> None:
    """``ATTACH`` the REST catalog at ``endpoint`` as ``alias``.

    Without options the catalog is attached unauthenticated (``AUTHORIZATION_TYPE 'none'``;
    DuckDB 1.5.5 otherwise insists on OAuth2 credentials). Pass e.g. ``secret="s"`` to use a
    secret made with ``CREATE SECRET``. Option names are upper-cased, values quoted.
    """
    opts = {"AUTHORIZATION_TYPE": "none"} if not options else {k.upper(): v for k, v in options.items()}
    rendered = "".join(f", {key} {_sql_literal(value)}" for key, value in opts.items())
    con.execute(
        f"ATTACH {_sql_literal(warehouse)} AS {alias} "
        f"(TYPE iceberg, ENDPOINT {_sql_literal(endpoint)}{rendered})"
    )


def _sql_literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"
