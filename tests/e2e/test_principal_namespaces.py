"""Principal ids from different authentication methods cannot collide, through a real gateway.

An OIDC subject equal to an API key's principal name (`etl`) is another principal: a Cedar policy
naming the key's principal (`Cedarberg::Service::"key:etl"`) does not apply to it, and it cannot
read the key principal's scan plans. Ids are namespaced: `key:<name>`, `oidc:<alias>/<subject>`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess, bundled_policies
from tests.support.idp import Oauth2MockServer

TIMEOUT = 30
AUDIENCE = "cedarberg"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
KEY_POLICY = """
@id("etl-key-reads-everything")
permit (
  principal == Cedarberg::Service::"key:etl",
  action in [Cedarberg::Action::"read"],
  resource
);
"""


@pytest.fixture(scope="module")
def idp() -> Iterator[Oauth2MockServer]:
    server = Oauth2MockServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def gateway(
    idp: Oauth2MockServer, tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("namespaces")
    policy_dir = root / "policies"
    bundled_policies(policy_dir, {"etl.cedar": KEY_POLICY})
    config = {
        "authz": {"policy_dir": str(policy_dir)},
        "oidc": {
            "issuers": [
                {
                    "issuer": idp.issuer,
                    "audiences": [AUDIENCE],
                    "principal_kind": "service",
                    "alias": "corp",
                    "privileged_groups_allowed": ["admins"],  # its subjects may be admins
                }
            ]
        },
        "planning": {"max_sync_manifests": 0},  # every plan is submitted: it has an id and an owner
    }
    with GatewayProcess(root / "gw", store_url=module_store_url, config=config) as gw:
        catalog = make_catalog(gw)
        catalog.create_namespace("ns")
        table = catalog.create_table("ns.t", SCHEMA)
        table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        yield gw


def _key(gw: GatewayProcess, groups: list[str]) -> str:
    answer = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": "etl", "kind": "service", "groups": groups},
        headers={"Authorization": f"Bearer {gw.admin_key}"},
        timeout=TIMEOUT,
    )
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["key"])


def _call(gw: GatewayProcess, method: str, path: str, credential: str, body: Any = None) -> requests.Response:
    return requests.request(
        method,
        f"{gw.url}/v1/namespaces/ns/tables/t{path}",
        json=body,
        headers={"Authorization": f"Bearer {credential}"},
        timeout=TIMEOUT,
    )


def _error_type(answer: requests.Response) -> str:
    return str(answer.json()["error"]["type"])


def test_a_policy_for_a_key_principal_does_not_apply_to_an_equal_oidc_subject(
    gateway: GatewayProcess, idp: Oauth2MockServer
) -> None:
    key = _key(gateway, [])  # no groups: only the policy naming `key:etl` lets it read
    assert _call(gateway, "GET", "", key).status_code == 200  # control
    same_name = idp.client_credentials("etl", AUDIENCE)  # sub "etl", no groups
    refused = _call(gateway, "GET", "", same_name)
    assert refused.status_code == 404, refused.text  # as if absent: it may not see the table
    assert _error_type(refused) == "NoSuchTableException"


def test_an_equal_oidc_subject_cannot_read_the_key_principals_plans(
    gateway: GatewayProcess, idp: Oauth2MockServer
) -> None:
    key = _key(gateway, ["admins"])
    submitted = _call(gateway, "POST", "/plan", key, {})
    assert submitted.status_code == 200, submitted.text
    plan_id = submitted.json()["plan-id"]
    deadline = time.monotonic() + 20
    while (mine := _call(gateway, "GET", f"/plan/{plan_id}", key)).json().get("status") == "submitted":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert mine.status_code == 200  # control: the owner reads its plan
    assert mine.json()["status"] == "completed"
    # The OIDC principal with the same subject may read the table, but the plan is not its own.
    same_name = idp.client_credentials("etl", AUDIENCE, groups="admins")
    assert _call(gateway, "GET", "", same_name).status_code == 200
    for method in ("GET", "DELETE"):
        other = _call(gateway, method, f"/plan/{plan_id}", same_name)
        assert other.status_code == 404, other.text
        assert _error_type(other) == "NoSuchPlanIdException"
    assert _call(gateway, "GET", f"/plan/{plan_id}", key).json()["status"] == "completed"  # untouched
