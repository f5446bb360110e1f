"""unregisterTable against a real gateway: an admin hands a table out of the catalog (its files stay,
the answer is its last metadata location and metadata, later commits 404), a writer may not (403,
nothing changes), a sealing warehouse answers a plain metadata file any engine can read, and
/v1/config advertises the route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.table import StaticTable

from cedarberg.catalog import locations
from tests.support.audit import flushed_audit_log
from tests.support.secure import AMBIENT_CA_VARIABLES, HTTP_TIMEOUT, SecureGateway
from tests.support.tls import TestPki

UNREGISTER = "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister"


class Lake:
    def __init__(self, gateway: SecureGateway, base: Path) -> None:
        self.gateway = gateway
        self.base = base
        self.writer = gateway.token(gateway.create_key("etl-bot", ["etl"]))

    def url(self, warehouse: str, path: str) -> str:
        return f"{self.gateway.url}/v1/{warehouse}/{path}"

    def create(self, warehouse: str, name: str) -> dict[str, Any]:
        """sales.NAME with two snapshots, written by pyiceberg as the writer; its load result."""
        catalog = self.gateway.catalog(token=self.writer, warehouse=warehouse)
        data = pa.table({"id": pa.array([1, 2], pa.int64())})
        table = catalog.create_table(f"sales.{name}", schema=data.schema)
        table.append(data)
        table.append(pa.table({"id": pa.array([3], pa.int64())}))
        catalog.close()
        answer = self.gateway.admin.get(
            self.url(warehouse, f"namespaces/sales/tables/{name}"), timeout=HTTP_TIMEOUT
        )
        assert answer.status_code == 200, answer.text
        loaded: dict[str, Any] = answer.json()
        return loaded

    def unregister(self, session: requests.Session, warehouse: str, name: str) -> requests.Response:
        return session.post(
            self.url(warehouse, f"namespaces/sales/tables/{name}/unregister"), timeout=HTTP_TIMEOUT
        )

    def listing(self, warehouse: str) -> list[str]:
        answer = self.gateway.admin.get(self.url(warehouse, "namespaces/sales/tables"), timeout=HTTP_TIMEOUT)
        assert answer.status_code == 200, answer.text
        return [entry["name"] for entry in answer.json()["identifiers"]]

    def commit(self, warehouse: str, name: str) -> requests.Response:
        """A harmless commit (a property) as the admin."""
        return self.gateway.admin.post(
            self.url(warehouse, f"namespaces/sales/tables/{name}"),
            json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]},
            timeout=HTTP_TIMEOUT,
        )

    def audit_records(self) -> list[dict[str, Any]]:
        return flushed_audit_log(self.base / "audit.jsonl")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    base = tmp_path_factory.mktemp("unregister")
    config = {
        "default_warehouse": "lake",
        "warehouses": {
            "lake": {"location": (base / "lake").as_uri()},
            "plain": {"location": (base / "plain").as_uri(), "seal_metadata_files": False},
        },
        "audit": {"destination": str(base / "audit.jsonl")},
    }
    with pytest.MonkeyPatch.context() as env:
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        with SecureGateway(base / "gw", pki=session_pki, config=config) as gateway:
            for warehouse in ("lake", "plain"):
                answer = gateway.admin.post(
                    f"{gateway.url}/v1/{warehouse}/namespaces",
                    json={"namespace": ["sales"], "properties": {"cedarberg.writers": "etl"}},
                    timeout=HTTP_TIMEOUT,
                )
                assert answer.status_code == 200, answer.text
            yield Lake(gateway, base)


def test_config_advertises_unregister(lake: Lake) -> None:
    answer = lake.gateway.admin.get(f"{lake.gateway.url}/v1/config", timeout=HTTP_TIMEOUT)
    assert UNREGISTER in answer.json()["endpoints"]


def test_admin_unregisters_a_plain_table(lake: Lake) -> None:
    loaded = lake.create("plain", "orders")
    answer = lake.unregister(lake.gateway.admin, "plain", "orders")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"metadata-location", "metadata"}
    # The last metadata, with every commit made before; its file is the one the table had.
    assert body["metadata-location"] == loaded["metadata-location"]
    assert body["metadata"]["current-snapshot-id"] == loaded["metadata"]["current-snapshot-id"]
    assert len(body["metadata"]["snapshots"]) == 2
    assert "orders" not in lake.listing("plain")
    assert lake.commit("plain", "orders").status_code == 404
    assert lake.unregister(lake.gateway.admin, "plain", "orders").status_code == 404
    # The files stay where they are: the table reads from them, and can be registered again.
    table = StaticTable.from_metadata(body["metadata-location"])
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    again = lake.gateway.admin.post(
        lake.url("plain", "namespaces/sales/register"),
        json={"name": "orders", "metadata-location": body["metadata-location"]},
        timeout=HTTP_TIMEOUT,
    )
    assert again.status_code == 200, again.text
    records = [r for r in lake.audit_records() if r.get("action") == "unregisterTable"]
    assert [(r["event"], r.get("decision"), r.get("outcome")) for r in records][:2] == [
        ("decision", "allow", None),
        ("mutation", "allow", "success"),
    ]
    assert {r["resource"] for r in records} == {'Cedarberg::Table::"plain/sales/orders"'}


def test_a_writer_may_not_unregister(lake: Lake) -> None:
    loaded = lake.create("plain", "events")
    writer = lake.gateway.session(lake.writer)
    answer = lake.unregister(writer, "plain", "events")
    assert answer.status_code == 403, answer.text
    assert "events" in lake.listing("plain")
    after = lake.gateway.admin.get(lake.url("plain", "namespaces/sales/tables/events"), timeout=HTTP_TIMEOUT)
    assert after.json()["metadata-location"] == loaded["metadata-location"]
    denied = [
        r
        for r in lake.audit_records()
        if r.get("action") == "unregisterTable" and r["resource"] == 'Cedarberg::Table::"plain/sales/events"'
    ]
    assert denied
    assert all(r.get("decision") == "deny" for r in denied)


def test_a_sealed_table_leaves_as_a_plain_metadata_file(lake: Lake) -> None:
    loaded = lake.create("lake", "secrets")
    sealed = loaded["metadata-location"]
    assert not Path(locations.to_local_path(sealed)).read_bytes().startswith(b"{")
    answer = lake.unregister(lake.gateway.admin, "lake", "secrets")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    plain = body["metadata-location"]
    assert plain != sealed
    # Next to the sealed file, with the same version number; plain Iceberg JSON.
    assert plain.rsplit("/", 1)[0] == sealed.rsplit("/", 1)[0]
    assert plain.rsplit("/", 1)[1].split("-", 1)[0] == sealed.rsplit("/", 1)[1].split("-", 1)[0]
    assert json.loads(Path(locations.to_local_path(plain)).read_bytes()) == body["metadata"]
    table = StaticTable.from_metadata(plain)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert "secrets" not in lake.listing("lake")
    assert lake.commit("lake", "secrets").status_code == 404


def test_an_idempotent_retry_gets_the_first_answer(lake: Lake) -> None:
    lake.create("plain", "retried")
    key = "0190f2b8-7a6c-7cc3-9d4e-5b1f2a3c4d5e"
    url = lake.url("plain", "namespaces/sales/tables/retried/unregister")
    first = lake.gateway.admin.post(url, headers={"Idempotency-Key": key}, timeout=HTTP_TIMEOUT)
    second = lake.gateway.admin.post(url, headers={"Idempotency-Key": key}, timeout=HTTP_TIMEOUT)
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert second.json() == first.json()
    assert "retried" not in lake.listing("plain")
