"""Server CPU per loadTable: start a gateway, create a table with a few snapshots, then issue a
bounded number of loadTable requests over keep-alive connections and divide the gateway process's
CPU time (user + system, from /proc) by the request count.

    .venv/bin/python -m bench.load_table [--requests 3000] [--concurrency 8] [--registry-ttl SECONDS]

`--registry-ttl 0` switches the registry read cache off (every request reads the registry), to see
what that cache saves; the other caches stay on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def hammer(url: str, total: int, concurrency: int, body: object | None = None) -> float:
    """Send `total` requests (GET, or POST of `body` as JSON) on `concurrency` connections."""
    async with aiohttp.ClientSession() as session:
        remaining = total

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                method = "GET" if body is None else "POST"
                async with session.request(method, url, json=body) as response:
                    assert response.status == 200, response.status
                    await response.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--registry-ttl", type=float, default=None, help="cache.registry_ttl_seconds")
    args = parser.parse_args()
    config = {} if args.registry_ttl is None else {"cache": {"registry_ttl_seconds": args.registry_ttl}}
    with tempfile.TemporaryDirectory() as tmp, GatewayProcess(Path(tmp) / "gw", config=config) as gateway:
        catalog = make_catalog(gateway)
        catalog.create_namespace("bench")
        table = catalog.create_table("bench.t", pa.schema([("id", pa.int64()), ("s", pa.string())]))
        for i in range(5):
            table.append(pa.table({"id": [i], "s": [str(i)]}))
        url = f"{gateway.url}/v1/namespaces/bench/tables/t"
        asyncio.run(hammer(url, 200, args.concurrency))  # warm-up
        assert gateway.process is not None
        before = cpu_seconds(gateway.process.pid)
        elapsed = asyncio.run(hammer(url, args.requests, args.concurrency))
        used = cpu_seconds(gateway.process.pid) - before
        print(
            f"loadTable: {args.requests} requests, {args.requests / elapsed:.0f} req/s, "
            f"server CPU {used / args.requests * 1e6:.0f} us/request"
        )


if __name__ == "__main__":
    main()
