"""`GET /admin/v1/review` on a real gateway with the bundled policies: the access review agrees
with what the gateway actually does for each key, admins may ask it and nobody else may.

One gateway process for the module (SQLite, authentication required, no anonymous principal). The
API keys reviewed are real keys of its store; each one's review verdict is checked against the
gateway's answer to that key's own requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.gateway import GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create

TIMEOUT = 30
REVIEW = "/admin/v1/review"
NS = "reviewed"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "a", "type": "int", "required": False}]}


def _call(gateway: GatewayProcess, key: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return requests.request(method, f"{gateway.url}{path}", headers=headers, timeout=TIMEOUT, **kwargs)


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[tuple[GatewayProcess, dict[str, str]]]:
    """The gateway and a key per principal: an admin, a reader (bi), a writer (etl), an outsider."""
    data_dir = tmp_path_factory.mktemp("review") / "gateway"
    keys = {
        "root": keys_create(data_dir, "root", ["admins"], store_url=module_store_url),
        "bea": keys_create(data_dir, "bea", ["bi"], store_url=module_store_url),
        "erin": keys_create(data_dir, "erin", ["etl"], store_url=module_store_url),
        "zed": keys_create(data_dir, "zed", ["sales"], store_url=module_store_url),
    }
    gw = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={"rate_limits": dict(GENEROUS_RATE_LIMITS)},
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {keys['root']}"},
    )
    gw.start()
    try:
        root = keys["root"]
        properties = {"cedarberg.readers": "bi", "cedarberg.writers": "etl"}
        made = _call(gw, root, "POST", "/v1/namespaces", json={"namespace": [NS], "properties": properties})
        assert made.status_code == 200, made.text
        table = _call(
            gw, root, "POST", f"/v1/namespaces/{NS}/tables", json={"name": "orders", "schema": SCHEMA}
        )
        assert table.status_code == 200, table.text
        yield gw, keys
    finally:
        gw.stop()


def _review(world: tuple[GatewayProcess, dict[str, str]], **params: Any) -> dict[str, Any]:
    gateway, keys = world
    response = _call(gateway, keys["root"], "GET", REVIEW, params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_review_of_a_table_agrees_with_the_gateways_decisions(
    world: tuple[GatewayProcess, dict[str, str]],
) -> None:
    gateway, keys = world
    review = _review(world, resource=f"default/{NS}/orders", action=["loadTable", "updateTable"])
    assert review["resource"] == f'Cedarberg::Table::"default/{NS}/orders"'
    assert review["truncated"] is False
    by_action = {a["action"]: a for a in review["actions"]}
    load, update = by_action["loadTable"], by_action["updateTable"]
    assert {p["id"] for p in load["principals"]} == {"key:root", "key:bea", "key:erin"}
    assert {p["id"] for p in update["principals"]} == {"key:root", "key:erin"}
    assert {g["group"] for g in load["groups"]} == {"admins", "bi", "etl"}
    bea = next(p for p in load["principals"] if p["id"] == "key:bea")
    assert bea["source"] == "api-key"
    assert bea["policy_ids"] == ["readers-read-granted"]
    conditions = {c["policy_id"]: c for c in load["conditions"]}
    assert (
        conditions["readers-read-granted"]["condition"] == 'when { (principal.groups).containsAny(["bi"]) }'
    )

    # What the review says of each key is what the gateway does with that key's own requests.
    for name, key in keys.items():
        loaded = _call(gateway, key, "GET", f"/v1/namespaces/{NS}/tables/orders")
        said = f"key:{name}" in {p["id"] for p in load["principals"]}
        assert (loaded.status_code == 200) == said, (name, loaded.status_code)
        commit = _call(gateway, key, "POST", f"/v1/namespaces/{NS}/tables/orders", json={"updates": []})
        said = f"key:{name}" in {p["id"] for p in update["principals"]}
        assert (commit.status_code == 200) == said, (name, commit.status_code, commit.text)


def test_review_of_a_principal_in_a_namespace(world: tuple[GatewayProcess, dict[str, str]]) -> None:
    gateway, keys = world
    review = _review(world, principal="key:bea", resource=f"default/{NS}")
    assert review["groups"] == ["bi"]
    assert review["groups_from"] == "api-key"
    objects = {o["resource"]: o for o in review["objects"]}
    table = objects[f'Cedarberg::Table::"default/{NS}/orders"']  # listed from the registry
    actions = {a["action"] for a in table["actions"]}
    assert "loadTable" in actions
    assert "updateTable" not in actions
    assert "listTables" in {a["action"] for a in objects[f'Cedarberg::Namespace::"default/{NS}"']["actions"]}
    # The gateway agrees: bea lists the namespace's tables and may not drop the table.
    assert _call(gateway, keys["bea"], "GET", f"/v1/namespaces/{NS}/tables").status_code == 200
    assert _call(gateway, keys["bea"], "DELETE", f"/v1/namespaces/{NS}/tables/orders").status_code == 403


def test_only_admins_may_review(world: tuple[GatewayProcess, dict[str, str]]) -> None:
    gateway, keys = world
    for name in ("bea", "erin", "zed"):  # readers and writers of the namespace are not admins
        denied = _call(gateway, keys[name], "GET", REVIEW, params={"resource": f"default/{NS}/orders"})
        assert denied.status_code == 403, denied.text
        assert denied.json()["error"]["type"] == "ForbiddenException"
    anonymous = requests.get(f"{gateway.url}{REVIEW}", params={"resource": "default"}, timeout=TIMEOUT)
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({"resource": f"default/{NS}/missing"}, 404, "NoSuchTableException"),
        ({"resource": f"default/{NS}/missing", "type": "view"}, 404, "NoSuchViewException"),
        ({"resource": "default/nowhere"}, 404, "NoSuchNamespaceException"),
        ({"resource": "elsewhere"}, 404, "NoSuchWarehouseException"),
        ({}, 400, "BadRequestException"),
        ({"resource": f"default/{NS}/orders", "action": "loadView"}, 400, "BadRequestException"),
        ({"resource": f"default/{NS}/orders", "principal": "key:bea"}, 400, "BadRequestException"),
        ({"resource": f"default/{NS}", "auth_method": "password"}, 400, "BadRequestException"),
    ],
)
def test_review_errors_are_error_models(
    world: tuple[GatewayProcess, dict[str, str]], params: dict[str, str], status: int, error: str
) -> None:
    gateway, keys = world
    response = _call(gateway, keys["root"], "GET", REVIEW, params=params)
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == error
    assert response.json()["error"]["code"] == status
