"""``cedarberg-pipeline``: run the pipeline, or only generate its input.

    PIPELINE_SERVICE_KEY=cbk_... PIPELINE_ANALYST_KEY=cbk_... \\
      cedarberg-pipeline run --uri https://127.0.0.1:8181 --ca-cert ca.pem \\
          --truststore truststore.p12 --truststore-password-file truststore.password
    cedarberg-pipeline generate --out raw/ --rows 1000 --seed 7

``run`` exits 0 if every stage succeeded, 1 if one failed, 2 for bad arguments or keys.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cedarberg.pipelines.config import ANALYST_KEY_VARIABLE, SERVICE_KEY_VARIABLE, ConfigError, PipelineConfig
from cedarberg.pipelines.generate import generate

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cedarberg-pipeline",
        description="A PySpark pipeline (bronze -> silver -> gold) through a Cedarberg gateway.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run every stage against a gateway",
        description=f"API keys are read from {SERVICE_KEY_VARIABLE} and {ANALYST_KEY_VARIABLE}.",
    )
    run.add_argument("--uri", required=True, help="gateway base URL, e.g. https://127.0.0.1:8181")
    run.add_argument("--warehouse", default="default", help="warehouse name (catalog property)")
    run.add_argument("--catalog", default="lake", help="Spark/DuckDB catalog name")
    run.add_argument("--raw-namespace", default="raw", help="namespace of bronze and silver (PII)")
    run.add_argument("--analytics-namespace", default="analytics", help="namespace of gold and its view")
    run.add_argument("--work-dir", type=Path, default=Path(".pipeline"), help="raw files, Spark scratch")
    run.add_argument("--truststore", type=Path, help="PKCS12 truststore with the gateway's CA (Spark)")
    run.add_argument("--truststore-password-file", type=Path, help="file holding the truststore password")
    run.add_argument("--ca-cert", type=Path, help="the gateway's CA as PEM (DuckDB)")
    run.add_argument("--skip-duckdb", action="store_true", help="do not read gold with DuckDB")
    _data_options(run)
    gen = commands.add_parser("generate", help="only write the raw event files and their manifest")
    gen.add_argument("--out", type=Path, required=True, help="directory to write into")
    _data_options(gen)
    return parser


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=300_000, help="raw events over both batches")
    parser.add_argument("--seed", type=int, default=42, help="random seed (same seed, same files)")
    parser.add_argument("--format", dest="file_format", choices=["json", "csv"], default="json")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "generate":
        manifest = generate(args.out, rows=args.rows, seed=args.seed, file_format=args.file_format)
        for batch in manifest.batches:
            columns = ", ".join(batch.columns)
            print(f"batch {batch.number}: {batch.rows:,} rows in {len(batch.files)} files ({columns})")
        return 0
    try:
        service_key, analyst_key = PipelineConfig.keys_from_environment()
        password = ""
        if args.truststore_password_file is not None:
            password = args.truststore_password_file.read_text().strip()
        config = PipelineConfig(
            uri=args.uri,
            service_key=service_key,
            analyst_key=analyst_key,
            work_dir=args.work_dir.resolve(),
            warehouse=args.warehouse,
            catalog=args.catalog,
            raw_namespace=args.raw_namespace,
            analytics_namespace=args.analytics_namespace,
            rows=args.rows,
            seed=args.seed,
            file_format=args.file_format,
            truststore=args.truststore,
            truststore_password=password,
            ca_cert=args.ca_cert,
            run_duckdb=not args.skip_duckdb,
        )
    except (ConfigError, OSError) as err:
        print(f"cedarberg-pipeline: {err}", file=sys.stderr)
        return 2
    from cedarberg.pipelines.run import run_pipeline

    return 0 if run_pipeline(config).ok else 1


if __name__ == "__main__":
    sys.exit(main())
