"""Spark sessions for the pipeline: one JVM, one isolated session per principal.

``base_session(config)`` starts the local JVM (``local[2]``, 1 GB driver, few shuffle partitions,
the Iceberg runtime jar and SQL extensions, and the truststore holding the gateway's CA).
``principal_session(base, config, key)`` derives a session with ``base.newSession()`` (its own SQL
configuration, catalogs and temporary views, on the same SparkContext) in which catalog
``config.catalog`` is the gateway, authenticated with ``key`` through OAuth2 client credentials
(``credential=<id>:<secret>``, exchanged at ``oauth2-server-uri`` for a gateway token). So the
service account and the analyst use the same catalog name (as two deployments would) with their
own credentials, and a view's SQL naming ``lake.analytics...`` resolves to the reader's catalog.

Only one SparkContext can exist per process: a caller that already has one (a test, a notebook)
passes it as ``base``; its JVM must already trust the gateway's CA and load the Iceberg extensions.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cedarberg.pipelines.config import ApiKey, PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ICEBERG_EXTENSIONS",
    "base_session",
    "catalog_properties",
    "iceberg_error",
    "principal_session",
    "runtime_jar",
]

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_RUNTIME_JAR_PREFIX = "iceberg-spark-runtime-3.5_2.12-"


def runtime_jar() -> Path:
    """The Iceberg Spark 3.5 runtime jar shipped by ``snowpark-connect-deps-iceberg``."""
    import snowpark_connect_deps_iceberg

    for jar in map(Path, snowpark_connect_deps_iceberg.list_jars()):
        if jar.name.startswith(_RUNTIME_JAR_PREFIX):
            return jar
    raise RuntimeError("no iceberg-spark-runtime-3.5_2.12 jar: pip install snowpark-connect-deps-iceberg")


def catalog_properties(config: PipelineConfig, key: ApiKey) -> dict[str, str]:
    """``spark.sql.catalog.<catalog>.*`` for the gateway as ``key``'s principal."""
    prefix = f"spark.sql.catalog.{config.catalog}"
    return {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": config.uri,
        f"{prefix}.warehouse": config.warehouse,
        f"{prefix}.credential": key.credential,
        f"{prefix}.oauth2-server-uri": config.token_uri,
        # Commits by other principals (and the other engine) must be seen at once.
        f"{prefix}.cache-enabled": "false",
    }


def base_session(config: PipelineConfig) -> SparkSession:
    """Start the local JVM for a pipeline run (the caller stops it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep the driver on loopback
    from pyspark.sql import SparkSession

    scratch = config.work_dir / "spark"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("cedarberg-pipeline")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(scratch / "spark-warehouse"))
        .config("spark.jars", str(runtime_jar()))
        .config("spark.sql.extensions", ICEBERG_EXTENSIONS)
    )
    if config.truststore is not None:
        # The JVM's trust is fixed when it starts: the gateway's CA, as a PKCS12 truststore.
        builder = builder.config(
            "spark.driver.extraJavaOptions",
            f"-Djavax.net.ssl.trustStore={config.truststore.resolve()} "
            "-Djavax.net.ssl.trustStoreType=PKCS12 "
            f"-Djavax.net.ssl.trustStorePassword={config.truststore_password}",
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def principal_session(base: SparkSession, config: PipelineConfig, key: ApiKey) -> SparkSession:
    """An isolated session on ``base``'s JVM whose catalog ``config.catalog`` acts as ``key``."""
    session = base.newSession()
    session.conf.set("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
    session.conf.set("spark.sql.session.timeZone", "UTC")
    for name, value in catalog_properties(config, key).items():
        session.conf.set(name, value)
    return session


def iceberg_error(err: BaseException) -> str:
    """The most telling line of a Spark/Py4J error: Iceberg's exception if it names one, else
    Spark's error class line; at most 300 characters."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if "org.apache.iceberg.exceptions." in line:
            return line[line.index("org.apache.iceberg.exceptions.") :][:300]
    return (lines[0] if lines else type(err).__name__)[:300]
