"""The Cedarberg data pipeline: PySpark through the gateway as its Iceberg REST catalog.

Stages, each as the principal a deployment would use::

    generate   raw event files (JSON lines or CSV, deterministic from --seed), with PII (email)
    bronze     -> lake.raw.events_bronze          partitioned by days(event_time), append per batch
    silver     -> lake.raw.events                  dedupe + MERGE INTO; batch 2 brings a new column
    gold       -> lake.analytics.daily_revenue     daily aggregates, plus view revenue_by_country
    maintain   rewrite_data_files + expire_snapshots on silver
    analyst    the reader: reads gold, is refused writes (403) and cannot see the PII namespace
    duckdb     a second engine, as the analyst, reads gold: must equal Spark's aggregates

Modules: ``config`` (settings, keys from the environment), ``generate``, ``spark`` (sessions and
catalog properties), ``stages``, ``analyst``, ``duckdb_check``, ``report`` (progress and summary),
``run`` (the orchestration, also usable with an existing SparkSession), ``cli``.
"""
