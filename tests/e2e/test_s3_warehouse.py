"""An S3 warehouse for real: a moto S3 server, the gateway writing sealed metadata files into it with
its own keys (`[warehouses.lake.s3]`), and pyiceberg writing data files with keys of its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port
from tests.support.s3 import REGION, MotoS3Server, moto_s3_server

SEALED = b"\x00CBSEAL"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[MotoS3Server]:
    with moto_s3_server() as server:
        yield server


@pytest.fixture
def lake(s3_server: MotoS3Server, tmp_path: Path) -> Iterator[GatewayProcess]:
    config = {"warehouses": {"lake": s3_server.warehouse("lake")}, "default_warehouse": "lake"}
    with GatewayProcess(tmp_path / "gateway", config=config) as gw:
        yield gw


def client(gateway: GatewayProcess, s3: MotoS3Server) -> RestCatalog:
    return make_catalog(
        gateway,
        warehouse="lake",
        **{
            "s3.endpoint": s3.url,
            "s3.region": REGION,
            "s3.access-key-id": s3.access_key_id,
            "s3.secret-access-key": s3.secret_access_key,
        },
    )


def test_create_append_load_in_an_s3_warehouse(lake: GatewayProcess, s3_server: MotoS3Server) -> None:
    catalog = client(lake, s3_server)
    catalog.create_namespace("sales")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "tag": pa.array(["a", "b", "c"])})
    table = catalog.create_table("sales.orders", schema=data.schema)
    assert table.location().startswith(f"s3://{s3_server.bucket}/lake/")
    table.append(data)
    table.append(pa.table({"id": pa.array([4], pa.int64()), "tag": pa.array(["d"])}))

    loaded = catalog.load_table("sales.orders")
    assert sorted(loaded.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]
    assert loaded.metadata_location is not None
    assert len(loaded.snapshots()) == 2

    # The gateway wrote one sealed metadata file per version into the bucket, with its own keys.
    prefix = loaded.location().removeprefix(f"s3://{s3_server.bucket}/")
    metadata_keys = [k for k in s3_server.keys(prefix + "/metadata/") if k.endswith(".metadata.json")]
    assert len(metadata_keys) == 3
    assert all(s3_server.read(key).startswith(SEALED) for key in metadata_keys)
    assert loaded.metadata_location.removeprefix(f"s3://{s3_server.bucket}/") in metadata_keys
    data_files = [k for k in s3_server.keys(prefix + "/data/") if k.endswith(".parquet")]
    assert len(data_files) == 2
    catalog.close()


def test_purge_deletes_the_tables_files_from_s3(lake: GatewayProcess, s3_server: MotoS3Server) -> None:
    catalog = client(lake, s3_server)
    catalog.create_namespace("tmp")
    data = pa.table({"id": pa.array([1], pa.int64())})
    table = catalog.create_table("tmp.scratch", schema=data.schema)
    table.append(data)
    prefix = table.location().removeprefix(f"s3://{s3_server.bucket}/")
    assert s3_server.keys(prefix + "/")

    catalog.purge_table("tmp.scratch")
    # A sealed warehouse with no retention: the gateway purges within its purge interval, and
    # nothing (not even a directory marker) is left under the table's prefix.
    deadline = time.monotonic() + 20
    while s3_server.keys(prefix + "/") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert s3_server.keys(prefix + "/") == []
    catalog.close()


def test_sts_down_fails_the_request_for_credentials_only(s3_server: MotoS3Server, tmp_path: Path) -> None:
    lake = s3_server.warehouse("down", vending=True)
    lake["vending"]["sts_endpoint"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = {"warehouses": {"lake": lake}, "default_warehouse": "lake"}
    with GatewayProcess(tmp_path / "gateway", config=config) as gw:
        url = f"{gw.url}/v1/lake/namespaces"
        assert requests.post(url, json={"namespace": ["n"]}, timeout=30).status_code == 200
        body = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": []}}
        assert requests.post(f"{url}/n/tables", json=body, timeout=30).status_code == 200
        plain = requests.get(f"{url}/n/tables/t", timeout=30)
        assert plain.status_code == 200
        vended = requests.get(
            f"{url}/n/tables/t", headers={"X-Iceberg-Access-Delegation": "vended-credentials"}, timeout=30
        )
        assert vended.status_code == 503
        assert vended.json()["error"]["type"] == "ServiceUnavailableException"
        assert vended.json()["error"]["message"] == "cannot vend credentials: STS is unavailable"
