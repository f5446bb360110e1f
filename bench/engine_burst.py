"""What one engine's planning burst sends to the catalog, from one principal and one address.

Starts a gateway on loopback with rate limiting off, creates `--tables` tables (a few appends
each), then runs `--queries` concurrent "queries" through pyiceberg, as an engine coordinator
would plan them: each query opens its catalog session (`GET /v1/config`, as a new pyiceberg or
Spark catalog does, and with `--credential` a token request; with `--shared-catalog`, one session
for all queries, as a long-lived Trino coordinator keeps), then loads `--tables-per-query` tables
and plans a scan of each client-side (`table.scan().plan_files()`: loadTable from the gateway,
manifests from storage). Bursts repeat back to back for `--seconds`, so the sustained rate shows
as well as one burst.

Every HTTP request pyiceberg sends is stamped on the client (a wrapper around
`requests.Session.send`, no proxy); the gateway's own count (`cedarberg_http_requests_total` from
`/metrics`) is printed beside it as a check. All requests come from one principal and one address,
so the figures are what the per-principal (`read`) and per-address budgets see.

    .venv/bin/python -m bench.engine_burst [--queries 50] [--tables 20] [--tables-per-query 3]
                                           [--seconds 20] [--shared-catalog] [--credential]

Bounded: at most `--seconds` of bursts (plus set-up) against a loopback gateway.
"""

from __future__ import annotations

import argparse
import collections
import math
import re
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess

_STAMPS: list[tuple[float, str]] = []
_LOCK = threading.Lock()
_ORIGINAL_SEND = requests.Session.send
_TABLE_PATH = re.compile(r"/tables/[^/?]+")


def _stamped_send(self: requests.Session, request: requests.PreparedRequest, **kwargs: Any) -> Any:
    response = _ORIGINAL_SEND(self, request, **kwargs)
    path = (request.path_url or "").split("?")[0]
    label = f"{request.method} {_TABLE_PATH.sub('/tables/{t}', path)}"
    with _LOCK:
        _STAMPS.append((time.monotonic(), label))
    return response


def _gateway_requests(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:  # noqa: S310 (loopback)
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cedarberg_http_requests_total{") and 'operation="readMetrics"' not in line
    )


def _setup(gateway: GatewayProcess, tables: int) -> list[str]:
    catalog = make_catalog(gateway)
    catalog.create_namespace("burst")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    names = []
    for i in range(tables):
        table = catalog.create_table(f"burst.t{i:02d}", schema)
        for j in range(3):
            table.append(pa.table({"id": list(range(j * 10, j * 10 + 10)), "region": [f"r{j}"] * 10}))
        names.append(f"burst.t{i:02d}")
    return names


def _catalog(gateway: GatewayProcess, credential: bool) -> Any:
    if not credential:
        return make_catalog(gateway)
    key_id, secret = gateway.admin_key.removeprefix("cbk_").split("_", 1)
    return make_catalog(gateway, credential=f"{key_id}:{secret}")


def _query(
    gateway: GatewayProcess, shared: Any, names: list[str], index: int, args: argparse.Namespace
) -> int:
    catalog = shared if shared is not None else _catalog(gateway, args.credential)
    files = 0
    for k in range(args.tables_per_query):
        table = catalog.load_table(names[(index * 7 + k * 3) % len(names)])
        files += sum(1 for _ in table.scan().plan_files())
    return files


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=50, help="concurrent queries per burst")
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--tables-per-query", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="repeat bursts for this long (max 60)")
    parser.add_argument("--shared-catalog", action="store_true", help="one catalog session for all queries")
    parser.add_argument(
        "--credential",
        action="store_true",
        help="sessions sign in with credential=<id>:<secret> (a token each)",
    )
    args = parser.parse_args()
    seconds = min(args.seconds, 60.0)
    config = {"rate_limits": {"enabled": False}}
    with tempfile.TemporaryDirectory() as tmp, GatewayProcess(Path(tmp) / "gw", config=config) as gateway:
        names = _setup(gateway, args.tables)
        requests.Session.send = _stamped_send  # type: ignore[method-assign]
        shared = _catalog(gateway, args.credential) if args.shared_catalog else None
        before = _gateway_requests(gateway.url)
        bursts: list[tuple[float, float]] = []
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.queries) as pool:
            while time.monotonic() - start < seconds:
                began = time.monotonic()
                jobs = [pool.submit(_query, gateway, shared, names, i, args) for i in range(args.queries)]
                for job in jobs:
                    job.result()
                bursts.append((began, time.monotonic()))
        elapsed = time.monotonic() - start
        server_count = _gateway_requests(gateway.url) - before
        requests.Session.send = _ORIGINAL_SEND  # type: ignore[method-assign]

    stamps = [(t, label) for t, label in _STAMPS if t >= start]
    first_begin, first_end = bursts[0]
    first = [s for s in stamps if first_begin <= s[0] <= first_end]
    per_second = collections.Counter(math.floor(t - start) for t, _ in stamps)
    in_window = [sum(1 for t, _ in stamps if w <= t - start < w + 1) for w in range(int(elapsed))]
    labels = collections.Counter(label for _, label in first)
    mode = "one shared catalog session" if args.shared_catalog else "a catalog session per query"
    mode += ", credential (OAuth2 token per session)" if args.credential else ", bearer API key"
    print(
        f"engine burst: {args.queries} concurrent queries x {args.tables_per_query} of {args.tables} tables, "
        f"{mode}, pyiceberg client-side planning, rate limits off"
    )
    print(
        f"  one burst: {len(first)} requests in {first_end - first_begin:.2f} s "
        f"({len(first) / (first_end - first_begin):.0f}/s)"
    )
    for label, count in labels.most_common():
        print(f"    {count:5d}  {label}")
    print(
        f"  sustained: {len(bursts)} bursts, {len(stamps)} requests in {elapsed:.1f} s = "
        f"{len(stamps) / elapsed:.0f}/s average, peak {max(per_second.values())}/s "
        f"(1-s buckets; full buckets {min(in_window or [0])}-{max(in_window or [0])}/s), "
        f"{len(stamps) / elapsed * 60:.0f}/minute"
    )
    print(f"  gateway counted {server_count:.0f} requests (cedarberg_http_requests_total)")
    print("  all from one principal and one address: per-principal read and per-address budgets see these")


if __name__ == "__main__":
    main()
