"""A second engine: DuckDB attaches the gateway as the analyst and reads gold.

DuckDB's ``iceberg`` extension (with ``httpfs`` and ``avro``, loaded from the
``duckdb-extension-*`` packages; nothing is downloaded) gets an iceberg secret holding the
analyst's client id and secret, which it exchanges at the token endpoint (HTTP Basic), and
attaches the warehouse over TLS trusting only the gateway's CA (``ca_cert_file``). It then reads
gold row by row, aggregates it per country itself, and looks for the PII table (which must be
"not found"). `check_duckdb` compares the result with what Spark read as the same analyst.
"""

# ruff: noqa: S608  (SQL text is built from PipelineConfig's identifiers, checked with isidentifier, and constants)

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cedarberg.pipelines.config import ApiKey, PipelineConfig
from cedarberg.pipelines.report import Report, StageFailedError
from cedarberg.pipelines.tables import GOLD_COLUMNS, Tables

if TYPE_CHECKING:
    import duckdb

    from cedarberg.pipelines.analyst import AnalystFindings

__all__ = ["DuckdbFindings", "check_duckdb", "read_with_duckdb"]

EXTENSIONS = ("httpfs", "avro", "iceberg")


@dataclass
class DuckdbFindings:
    gold: list[tuple[Any, ...]] = field(default_factory=list)
    by_country: list[tuple[Any, ...]] = field(default_factory=list)
    pii_error: str = ""


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _extension(name: str) -> Path:
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise StageFailedError(f"DuckDB extension package duckdb-extension-{name} is not installed")
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise StageFailedError(
            f"{path} missing: duckdb-extension-{name} must match duckdb {duckdb.__version__}"
        )
    return path


def connect(config: PipelineConfig, key: ApiKey) -> duckdb.DuckDBPyConnection:
    """DuckDB with the gateway's warehouse attached as ``config.catalog``, as ``key``."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for name in EXTENSIONS:
            con.execute(f"LOAD {_sql_string(str(_extension(name)))}")
        con.execute("SET enable_server_cert_verification = true")
        if config.ca_cert is not None:
            con.execute(f"SET ca_cert_file = {_sql_string(str(config.ca_cert.resolve()))}")
        con.execute(
            f"CREATE SECRET pipeline_reader (TYPE iceberg, CLIENT_ID {_sql_string(key.client_id)}, "
            f"CLIENT_SECRET {_sql_string(key.secret)}, OAUTH2_SERVER_URI {_sql_string(config.token_uri)})"
        )
        con.execute(
            f"ATTACH {_sql_string(config.warehouse)} AS {config.catalog} "
            f"(TYPE iceberg, ENDPOINT {_sql_string(config.uri)}, SECRET pipeline_reader)"
        )
    except BaseException:
        con.close()
        raise
    return con


def read_with_duckdb(config: PipelineConfig, tables: Tables, report: Report) -> DuckdbFindings:
    import duckdb

    from cedarberg.pipelines.analyst import ANALYST

    found = DuckdbFindings()
    con = connect(config, config.analyst_key)
    try:
        found.gold = [
            tuple(r)
            for r in con.execute(
                f"SELECT {', '.join(GOLD_COLUMNS)} FROM {tables.gold} ORDER BY day, country"
            ).fetchall()
        ]
        report.decision(f"{ANALYST} (duckdb)", "read", tables.gold, "allowed")
        found.by_country = [
            tuple(r)
            for r in con.execute(
                f"SELECT country, sum(events), sum(purchases), sum(revenue) FROM {tables.gold} "
                "GROUP BY country ORDER BY country"
            ).fetchall()
        ]
        try:
            con.execute(f"SELECT * FROM {tables.silver} LIMIT 1").fetchall()
        except duckdb.Error as err:
            found.pii_error = str(err).splitlines()[0][:300]
            report.decision(f"{ANALYST} (duckdb)", "read", tables.silver, "hidden", found.pii_error)
        else:
            raise StageFailedError(f"DuckDB, as the analyst, could read {tables.silver}")
    finally:
        con.close()
    return found


def check_duckdb(
    config: PipelineConfig, tables: Tables, spark_found: AnalystFindings, report: Report
) -> DuckdbFindings:
    """Read gold with DuckDB and require the same rows as Spark and the same per-country sums as
    the view Spark evaluated; raises `StageFailedError` otherwise."""
    found = read_with_duckdb(config, tables, report)
    report.line(f"DuckDB read {tables.gold}: {len(found.gold)} rows over TLS as the analyst")
    if found.gold != spark_found.gold:
        differ = [(s, d) for s, d in zip(spark_found.gold, found.gold, strict=False) if s != d][:3]
        raise StageFailedError(
            f"DuckDB read {len(found.gold)} gold rows, Spark {len(spark_found.gold)}; differences {differ}"
        )
    if found.by_country != spark_found.by_country:
        raise StageFailedError(
            f"per-country sums differ: DuckDB {found.by_country[:3]}, Spark {spark_found.by_country[:3]}"
        )
    report.line(
        f"DuckDB == Spark: {len(found.gold)} daily rows and {len(found.by_country)} per-country sums equal"
    )
    report.line(f"DuckDB, {tables.silver}: {found.pii_error}")
    return found
