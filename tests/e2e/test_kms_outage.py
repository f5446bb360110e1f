"""A KMS that cannot answer fails closed, and the catalog recovers by itself when it returns.

The KMS is the real OpenBao server (Vault transit), sealed mid-run: every transit call answers 503,
as a Vault that lost quorum or was sealed by an operator does. The gateway's data-key cache is off,
so every request needs the KMS.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess
from tests.support.kms_servers import OpenBaoServer

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


@pytest.fixture
def vault_gateway(openbao: OpenBaoServer, tmp_path: Path) -> Iterator[GatewayProcess]:
    config = {"kms": {**openbao.kms_config, "cache": {"max_entries": 0}, "timeout_seconds": 3}}
    with GatewayProcess(tmp_path / "gw", config=config) as gw:
        yield gw


def _metadata_files(gw: GatewayProcess) -> set[Path]:
    return {p for p in gw.warehouse_dir.rglob("*.metadata.json")}


def _assert_unavailable(response: requests.Response) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "ServiceUnavailableException"
    assert "key management service" in error["message"]
    assert "root" not in error["message"]  # the Vault token never leaks


def test_kms_outage_mid_commit_fails_closed_and_recovers(
    vault_gateway: GatewayProcess, openbao: OpenBaoServer
) -> None:
    gw = vault_gateway
    cat = make_catalog(gw)
    cat.create_namespace("ops")
    table = cat.create_table("ops.t", SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    url = f"{gw.url}/v1/namespaces/ops/tables/t"
    before = requests.get(url, timeout=30).json()
    files_before = _metadata_files(gw)
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"during": "outage"}}]}

    openbao.seal()
    try:
        _assert_unavailable(requests.post(url, json=commit, timeout=30))
        _assert_unavailable(requests.get(url, timeout=30))
        created = requests.post(
            f"{gw.url}/v1/namespaces/ops/tables",
            json={"name": "new", "schema": SCHEMA.model_dump(by_alias=True)},
            timeout=30,
        )
        _assert_unavailable(created)
        _assert_unavailable(requests.delete(url, timeout=30))
        assert _metadata_files(gw) == files_before  # nothing written, nothing moved
    finally:
        openbao.unseal()

    after = requests.get(url, timeout=30)
    assert after.status_code == 200, after.text
    assert after.json() == before  # the table is exactly as it was
    assert requests.get(f"{gw.url}/v1/namespaces/ops/tables/new", timeout=30).status_code == 404
    recovered = requests.post(url, json=commit, timeout=30)
    assert recovered.status_code == 200, recovered.text
    assert recovered.json()["metadata"]["properties"]["during"] == "outage"
    assert cat.load_table("ops.t").scan().to_arrow().num_rows == 2
