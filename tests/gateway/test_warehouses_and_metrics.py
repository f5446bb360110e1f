"""Several warehouses behind one gateway, and stored metrics reports."""

from pathlib import Path

import requests

from tests.support import registry
from tests.support.gateway import GatewayProcess

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


def test_warehouses_are_separate_catalogs(tmp_path: Path, fresh_store_url: str | None) -> None:
    config = {
        "default_warehouse": "main",
        "warehouses": {
            "main": {"location": (tmp_path / "wh-main").as_uri()},
            "sales": {"location": (tmp_path / "wh-sales").as_uri()},
        },
    }
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url, config=config) as gw:
        base = gw.url
        assert requests.get(f"{base}/v1/config", timeout=10).json()["overrides"]["prefix"] == "main"
        by_name = requests.get(f"{base}/v1/config", params={"warehouse": "sales"}, timeout=10).json()
        assert by_name["overrides"]["prefix"] == "sales"
        by_location = requests.get(
            f"{base}/v1/config", params={"warehouse": (tmp_path / "wh-sales").as_uri()}, timeout=10
        ).json()
        assert by_location["overrides"]["prefix"] == "sales"

        assert requests.post(f"{base}/v1/sales/namespaces", json={"namespace": ["q"]}, timeout=10).ok
        created = requests.post(
            f"{base}/v1/sales/namespaces/q/tables", json={"name": "t", "schema": SCHEMA}, timeout=10
        )
        assert created.status_code == 200
        assert created.json()["metadata"]["location"].startswith((tmp_path / "wh-sales").as_uri())
        assert (tmp_path / "wh-sales" / "q").is_dir()
        assert not (tmp_path / "wh-main").exists()

        assert requests.get(f"{base}/v1/sales/namespaces", timeout=10).json()["namespaces"] == [["q"]]
        assert requests.get(f"{base}/v1/main/namespaces", timeout=10).json()["namespaces"] == []
        assert requests.get(f"{base}/v1/namespaces", timeout=10).json()["namespaces"] == []
        missing = requests.get(f"{base}/v1/main/namespaces/q/tables/t", timeout=10)
        assert missing.status_code == 404


def test_table_outside_its_warehouse_is_refused(tmp_path: Path, fresh_store_url: str | None) -> None:
    config = {"warehouses": {"default": {"location": (tmp_path / "wh").as_uri()}}}
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url, config=config) as gw:
        requests.post(f"{gw.url}/v1/namespaces", json={"namespace": ["n"]}, timeout=10)
        sibling = (tmp_path / "wh-other" / "t").as_uri()
        refused = requests.post(
            f"{gw.url}/v1/namespaces/n/tables",
            json={"name": "t", "schema": SCHEMA, "location": sibling},
            timeout=10,
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "BadRequestException"
        assert not (tmp_path / "wh-other").exists()
        assert requests.get(f"{gw.url}/v1/namespaces/n/tables", timeout=10).json()["identifiers"] == []


def test_metrics_reports_are_stored(gateway: GatewayProcess) -> None:
    base = gateway.url
    requests.post(f"{base}/v1/namespaces", json={"namespace": ["m"]}, timeout=10)
    requests.post(f"{base}/v1/namespaces/m/tables", json={"name": "t", "schema": SCHEMA}, timeout=10)
    report = {
        "report-type": "scan-report",
        "table-name": "m.t",
        "snapshot-id": 1,
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [1],
        "projected-field-names": ["id"],
        "metrics": {},
    }
    for _ in range(2):
        answer = requests.post(f"{base}/v1/namespaces/m/tables/t/metrics", json=report, timeout=10)
        assert answer.status_code == 204
    missing = requests.post(f"{base}/v1/namespaces/m/tables/nope/metrics", json=report, timeout=10)
    assert missing.status_code == 404
    rows = registry.query(gateway, "SELECT report_type, name FROM metrics_reports ORDER BY id")
    assert rows == [("scan-report", "t"), ("scan-report", "t")]
