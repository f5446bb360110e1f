"""A short PySpark job against a running Cedarberg gateway (used by scripts/demo.sh).

As the writer (API key in ``DEMO_WRITER_KEY``, sent as Spark's ``credential=<id>:<secret>``, which
Iceberg exchanges for a gateway token at ``/v1/oauth/tokens``): creates a partitioned table in
namespace ``demo`` (created, with grants, by the admin beforehand), inserts rows, reads them back
and prints them. Then, with ``DEMO_READER_KEY``, reads the table as a reader and shows that the
reader's append is refused (403, ``ForbiddenException``). Over https the JVM trusts the demo CA
through ``--truststore``. Exits non-zero if anything differs from that.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from pathlib import Path
from typing import Any

NAMESPACE = "demo"
KEY_PREFIX = "cbk_"
TABLE = f"{NAMESPACE}.rides"
ROWS = [
    (1, "cape town", 12.5, dt.datetime(2026, 1, 5, 8, 30)),
    (2, "cape town", 7.25, dt.datetime(2026, 1, 5, 17, 45)),
    (3, "stellenbosch", 31.0, dt.datetime(2026, 1, 5, 9, 10)),
    (4, "stellenbosch", 18.75, dt.datetime(2026, 1, 6, 12, 0)),
    (5, "clanwilliam", 44.0, dt.datetime(2026, 1, 6, 7, 15)),
    (6, "cape town", 9.5, dt.datetime(2026, 1, 6, 22, 5)),
]


def runtime_jar() -> Path:
    import snowpark_connect_deps_iceberg

    for jar in map(Path, snowpark_connect_deps_iceberg.list_jars()):
        if jar.name.startswith("iceberg-spark-runtime-3.5_2.12-"):
            return jar
    raise SystemExit("no iceberg-spark-runtime-3.5_2.12 jar: pip install snowpark-connect-deps-iceberg")


def credential(key: str) -> str:
    """``cbk_<id>_<secret>`` -> ``<id>:<secret>`` (OAuth2 client id and secret)."""
    if not key.startswith(KEY_PREFIX) or len(key) != 64 or key[20] != "_":
        raise SystemExit("not an API key (cbk_<id>_<secret>)")
    return f"{key[4:20]}:{key[21:]}"


def catalog_conf(name: str, uri: str, key: str | None) -> dict[str, str]:
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri,
        f"{prefix}.cache-enabled": "false",
    }
    if key:
        conf[f"{prefix}.credential"] = credential(key)
        conf[f"{prefix}.oauth2-server-uri"] = uri.rstrip("/") + "/v1/oauth/tokens"
    return conf


def ride_schema() -> Any:
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("id", LongType()),
            StructField("city", StringType()),
            StructField("fare", DoubleType()),
            StructField("ts", TimestampType()),
        ]
    )


def start_session(args: argparse.Namespace, catalogs: dict[str, str | None]) -> Any:
    """A local SparkSession with one REST catalog per ``catalogs`` entry (name -> API key)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep the driver on loopback
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("cedarberg-demo")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(Path(args.scratch_dir) / "spark-warehouse"))
        .config("spark.jars", str(runtime_jar()))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    )
    if args.truststore:
        # The JVM trusts the demo CA through a PKCS12 truststore (fixed when the JVM starts).
        password_file = args.truststore_password_file
        password = Path(password_file).read_text().strip() if password_file else ""
        builder = builder.config(
            "spark.driver.extraJavaOptions",
            f"-Djavax.net.ssl.trustStore={Path(args.truststore).resolve()} "
            "-Djavax.net.ssl.trustStoreType=PKCS12 "
            f"-Djavax.net.ssl.trustStorePassword={password}",
        )
    for name, key in catalogs.items():
        for conf_key, value in catalog_conf(name, args.uri, key).items():
            builder = builder.config(conf_key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def writer_job(spark: Any, cat: str) -> list[str]:
    """Create, fill and read the table; return what went wrong."""
    from pyspark.sql import functions as F

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.{NAMESPACE}")
    spark.sql(f"DROP TABLE IF EXISTS {cat}.{TABLE} PURGE")
    spark.sql(
        f"""CREATE TABLE {cat}.{TABLE} (
                id BIGINT, city STRING, fare DOUBLE, ts TIMESTAMP)
            USING iceberg
            PARTITIONED BY (city, days(ts))"""
    )
    print(f"==> created {cat}.{TABLE}, partitioned by (city, days(ts))")

    spark.createDataFrame(ROWS, ride_schema()).writeTo(f"{cat}.{TABLE}").append()
    print(f"==> inserted {len(ROWS)} rows")

    print("==> namespaces:")
    spark.sql(f"SHOW NAMESPACES IN {cat}").show(truncate=False)
    print("==> rows read back:")
    rows = spark.table(f"{cat}.{TABLE}").orderBy("id")
    rows.show(truncate=False)
    print("==> fares per city:")
    rows.groupBy("city").agg(F.count("*").alias("rides"), F.sum("fare").alias("total")).orderBy("city").show(
        truncate=False
    )
    print("==> partitions:")
    partitions = spark.table(f"{cat}.{TABLE}.partitions").select("partition", "record_count")
    partitions.orderBy("partition").show(truncate=False)

    got = [(r.id, r.city, r.fare, r.ts) for r in rows.collect()]
    expected_partitions = len({(city, ts.date()) for _, city, _, ts in ROWS})
    failures = []
    if len(got) != len(ROWS):
        failures.append(f"expected {len(ROWS)} rows, read {len(got)}")
    elif got != ROWS:
        failures.append(f"rows differ:\n  wrote {ROWS}\n  read  {got}")
    if partitions.count() != expected_partitions:
        failures.append(f"expected {expected_partitions} partitions, found {partitions.count()}")
    if not failures:
        print(f"==> {len(got)} rows in {expected_partitions} partitions, as written")
    return failures


def reader_job(spark: Any, cat: str) -> list[str]:
    """The reader may read the table but not write to it; return what went wrong."""
    failures = []
    count = spark.table(f"{cat}.{TABLE}").count()
    print(f"==> as the reader ({cat}): {count} rows readable")
    if count != len(ROWS):
        failures.append(f"the reader read {count} rows, expected {len(ROWS)}")
    extra = [(99, "nowhere", 0.0, dt.datetime(2026, 1, 7))]
    spark.sparkContext.setLogLevel("OFF")  # Spark logs the aborted write job at ERROR level
    try:
        spark.createDataFrame(extra, ride_schema()).writeTo(f"{cat}.{TABLE}").append()
    except Exception as err:  # a Py4J/Spark error wrapping Iceberg's ForbiddenException
        text = str(err)
        line = next((ln.strip(" :") for ln in text.splitlines() if "ForbiddenException" in ln), "")
        if line:
            print(f"==> as the reader: the append was refused: {line[:200]}")
        else:
            failures.append(f"the reader's append failed, but not with ForbiddenException: {text[:500]}")
    else:
        failures.append("the reader's append was accepted")
    finally:
        spark.sparkContext.setLogLevel("ERROR")
    after = spark.table(f"{cat}.{TABLE}").count()
    if after != len(ROWS):
        failures.append(f"after the refused append the table has {after} rows")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", default="http://127.0.0.1:8181", help="gateway base URL")
    parser.add_argument("--catalog", default="cedarberg", help="Spark catalog name")
    parser.add_argument("--scratch-dir", default=".demo/spark", help="Spark's own scratch files")
    parser.add_argument("--truststore", help="PKCS12 truststore with the gateway's CA (for https)")
    parser.add_argument("--truststore-password-file", help="file holding the truststore password")
    args = parser.parse_args()
    writer_key = os.environ.get("DEMO_WRITER_KEY") or None
    reader_key = os.environ.get("DEMO_READER_KEY") or None
    cat = args.catalog
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cat):
        parser.error(f"unsuitable catalog name {cat!r}")
    reader_cat = f"{cat}_reader"
    catalogs = {cat: writer_key, **({reader_cat: reader_key} if reader_key else {})}

    spark = start_session(args, catalogs)
    try:
        who = "the writer's API key as credential=<id>:<secret>" if writer_key else "no credentials"
        print(f"==> catalog {cat} at {args.uri}, with {who}")
        failures = writer_job(spark, cat)
        if reader_key and not failures:
            print(f"==> catalog {reader_cat}, with the reader's API key")
            failures += reader_job(spark, reader_cat)
        if failures:
            print("==> FAILED: " + "; ".join(failures), file=sys.stderr)
            return 1
        print("==> OK")
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
