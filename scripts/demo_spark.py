"""A short PySpark job against a running Cedarberg gateway (used by scripts/demo.sh).

Creates a namespace and a partitioned table, inserts rows, reads them back and prints them.
Exits non-zero if the data read back is not what was written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from pathlib import Path

NAMESPACE = "demo"
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", default="http://127.0.0.1:8181", help="gateway base URL")
    parser.add_argument("--catalog", default="cedarberg", help="Spark catalog name")
    parser.add_argument("--scratch-dir", default=".demo/spark", help="Spark's own scratch files")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep the driver on loopback
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    cat = args.catalog
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cat):
        parser.error(f"unsuitable catalog name {cat!r}")
    spark = (
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
        .config(f"spark.sql.catalog.{cat}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{cat}.type", "rest")
        .config(f"spark.sql.catalog.{cat}.uri", args.uri)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print(f"==> catalog {cat} at {args.uri}")
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.{NAMESPACE}")
        # The state directory survives between runs: start from an empty table each time.
        spark.sql(f"DROP TABLE IF EXISTS {cat}.{TABLE} PURGE")
        spark.sql(
            f"""CREATE TABLE {cat}.{TABLE} (
                    id BIGINT, city STRING, fare DOUBLE, ts TIMESTAMP)
                USING iceberg
                PARTITIONED BY (city, days(ts))"""
        )
        print(f"==> created {cat}.{TABLE}, partitioned by (city, days(ts))")

        schema = StructType(
            [
                StructField("id", LongType()),
                StructField("city", StringType()),
                StructField("fare", DoubleType()),
                StructField("ts", TimestampType()),
            ]
        )
        spark.createDataFrame(ROWS, schema).writeTo(f"{cat}.{TABLE}").append()
        print(f"==> inserted {len(ROWS)} rows")

        print("==> namespaces:")
        spark.sql(f"SHOW NAMESPACES IN {cat}").show(truncate=False)
        print("==> rows read back:")
        rows = spark.table(f"{cat}.{TABLE}").orderBy("id")
        rows.show(truncate=False)
        print("==> fares per city:")
        rows.groupBy("city").agg(F.count("*").alias("rides"), F.sum("fare").alias("total")).orderBy(
            "city"
        ).show(truncate=False)
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
        if failures:
            print("==> FAILED: " + "; ".join(failures), file=sys.stderr)
            return 1
        print(f"==> OK: {len(got)} rows in {expected_partitions} partitions")
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
