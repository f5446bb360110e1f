"""Creates racing for one place through a real gateway, on each store (issue 32: on PostgreSQL a
create and a namespace creation are one statement each and changes of roots lock per place).

Attack: two writers create at overlapping places at the same moment (a table inside another
table's location; a namespace whose directory lies inside a table being created): exactly one
lands, the other is refused 400 as if it came second, and the registry holds only the winner.
Control: creations at disjoint places all land, however many arrive together.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from tests.support.gateway import GatewayProcess

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
ROUNDS = 6


def _post(url: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(url, json=body, timeout=60)


def _race(calls: list[tuple[str, dict[str, Any]]]) -> list[requests.Response]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: _post(*call), calls))


def test_creates_at_overlapping_places_let_exactly_one_land(
    tmp_path: Path, fresh_store_url: str | None
) -> None:
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url) as gw:
        assert _post(f"{gw.url}/v1/namespaces", {"namespace": ["ns"]}).status_code == 200
        ns_dir = (gw.data_dir / "warehouse" / "ns").as_uri()
        tables = f"{gw.url}/v1/namespaces/ns/tables"
        for round_no in range(ROUNDS):
            outer = f"{ns_dir}/race{round_no}-{uuid.uuid4().hex}"
            answers = _race(
                [
                    (tables, {"name": f"a{round_no}", "schema": SCHEMA, "location": outer}),
                    (tables, {"name": f"b{round_no}", "schema": SCHEMA, "location": f"{outer}/inner"}),
                ]
            )
            statuses = sorted(answer.status_code for answer in answers)
            assert statuses == [200, 400], [answer.text for answer in answers]
            refused = next(answer for answer in answers if answer.status_code == 400)
            assert refused.json()["error"]["type"] == "BadRequestException"
            assert "overlaps" in refused.json()["error"]["message"]
            landed = {
                name
                for name in (f"a{round_no}", f"b{round_no}")
                if requests.get(f"{tables}/{name}", timeout=30).status_code == 200
            }
            assert len(landed) == 1


def test_a_namespace_and_a_table_racing_for_one_place_let_exactly_one_land(
    tmp_path: Path, fresh_store_url: str | None
) -> None:
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url) as gw:
        assert _post(f"{gw.url}/v1/namespaces", {"namespace": ["ns"]}).status_code == 200
        ns_dir = (gw.data_dir / "warehouse" / "ns").as_uri()
        for round_no in range(ROUNDS):
            place = f"{ns_dir}/place{round_no}-{uuid.uuid4().hex}"
            namespace = f"n{round_no}"
            answers = _race(
                [
                    (
                        f"{gw.url}/v1/namespaces/ns/tables",
                        {"name": f"t{round_no}", "schema": SCHEMA, "location": place},
                    ),
                    (
                        f"{gw.url}/v1/namespaces",
                        {"namespace": [namespace], "properties": {"location": f"{place}/child"}},
                    ),
                ]
            )
            assert sorted(answer.status_code for answer in answers) == [200, 400], [a.text for a in answers]
            table_landed = answers[0].status_code == 200
            namespace_exists = (
                requests.get(f"{gw.url}/v1/namespaces/{namespace}", timeout=30).status_code == 200
            )
            assert namespace_exists is not table_landed


def test_creations_at_disjoint_places_all_land(tmp_path: Path, fresh_store_url: str | None) -> None:
    with GatewayProcess(tmp_path / "gw", store_url=fresh_store_url) as gw:
        answers = _race([(f"{gw.url}/v1/namespaces", {"namespace": [f"n{i}"]}) for i in range(8)])
        assert [answer.status_code for answer in answers] == [200] * 8
        answers = _race(
            [(f"{gw.url}/v1/namespaces/n{i}/tables", {"name": "t", "schema": SCHEMA}) for i in range(8)]
        )
        assert [answer.status_code for answer in answers] == [200] * 8
        listed = requests.get(f"{gw.url}/v1/namespaces", timeout=30).json()["namespaces"]
        assert sorted(listed) == sorted([f"n{i}"] for i in range(8))
