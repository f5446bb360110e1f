"""Eight writers committing to one table through one gateway process: every commit lands, none is
refused for losing races to the others (they wait for each other instead of re-planning)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tests.support.gateway import GatewayProcess

WRITERS = 8
COMMITS_EACH = 5
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


def test_concurrent_writers_on_one_table_all_land(tmp_path: Path, fresh_store_url: str | None) -> None:
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url) as gw:
        assert requests.post(f"{gw.url}/v1/namespaces", json={"namespace": ["ns"]}, timeout=30).ok
        created = requests.post(
            f"{gw.url}/v1/namespaces/ns/tables", json={"name": "t", "schema": SCHEMA}, timeout=30
        )
        assert created.status_code == 200, created.text
        table = f"{gw.url}/v1/namespaces/ns/tables/t"

        def writer(n: int) -> list[int]:
            with requests.Session() as session:
                statuses = []
                for i in range(COMMITS_EACH):
                    update = {"action": "set-properties", "updates": {f"w{n}-{i}": "x"}}
                    answer = session.post(table, json={"requirements": [], "updates": [update]}, timeout=60)
                    statuses.append(answer.status_code)
                return statuses

        with ThreadPoolExecutor(WRITERS) as pool:
            statuses = [s for result in pool.map(writer, range(WRITERS)) for s in result]
        assert statuses == [200] * WRITERS * COMMITS_EACH
        metadata = requests.get(table, timeout=30).json()["metadata"]
        written = {key for key in metadata["properties"] if key.startswith("w")}
        assert written == {f"w{n}-{i}" for n in range(WRITERS) for i in range(COMMITS_EACH)}
        assert len(metadata["metadata-log"]) == WRITERS * COMMITS_EACH  # one version per commit
