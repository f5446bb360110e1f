"""Server CPU per planTableScan: start a gateway, create a partitioned table with a number of
appends (one manifest each), then issue a bounded number of plans (a select and a filter that
prunes most files) and divide the gateway process's CPU time by the plan count.

    .venv/bin/python -m bench.plan_scan [--requests 500] [--concurrency 4] [--appends 20]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from bench.load_table import cpu_seconds, hammer
from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
)
PLAN = {
    "select": ["id", "region"],
    "filter": {
        "type": "and",
        "left": {"type": "eq", "term": "region", "value": "r3"},
        "right": {"type": "gt", "term": "id", "value": 10},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--appends", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, GatewayProcess(Path(tmp) / "gw") as gateway:
        catalog = make_catalog(gateway)
        catalog.create_namespace("bench")
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
        table = catalog.create_table("bench.t", SCHEMA, partition_spec=spec)
        for i in range(args.appends):
            ids = list(range(i * 10, i * 10 + 10))
            table.append(pa.table({"id": pa.array(ids, pa.int64()), "region": [f"r{i % 5}"] * 10}))
        url = f"{gateway.url}/v1/namespaces/bench/tables/t/plan"
        asyncio.run(hammer(url, 50, args.concurrency, PLAN))  # warm-up
        assert gateway.process is not None
        before = cpu_seconds(gateway.process.pid)
        elapsed = asyncio.run(hammer(url, args.requests, args.concurrency, PLAN))
        used = cpu_seconds(gateway.process.pid) - before
        print(
            f"planTableScan ({args.appends} manifests, {args.appends // 5} files selected): "
            f"{args.requests} plans, {args.requests / elapsed:.0f} plans/s, "
            f"server CPU {used / args.requests * 1e3:.2f} ms/plan"
        )


if __name__ == "__main__":
    main()
