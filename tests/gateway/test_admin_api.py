"""The admin API (`/admin/v1/...`) and the token endpoints (`/v1/oauth/...`) on a real gateway.

One gateway process for the module, authentication required (no anonymous principal), plain HTTP
on loopback. Its first admin key is bootstrapped with `cedarberg keys create` before it starts (its
readiness probe needs one); another is created with the same command while it runs, and that key
drives the tests, so the CLI is proven to work beside a live server on the same store.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import jwt
import pytest
import requests

from tests.support.gateway import GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create, split_key

TIMEOUT = 30
ADMIN = "/admin/v1"


class Api:
    """requests against the gateway with one credential."""

    def __init__(self, base: str, key: str | None) -> None:
        self.base = base
        self.session = requests.Session()
        if key is not None:
            self.session.headers["Authorization"] = f"Bearer {key}"

    def __call__(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.session.request(method, f"{self.base}{path}", timeout=TIMEOUT, **kwargs)


@pytest.fixture(scope="module")
def started(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[tuple[GatewayProcess, str]]:
    """The gateway and its bootstrap admin key."""
    data_dir = tmp_path_factory.mktemp("admin") / "gateway"
    bootstrap = keys_create(data_dir, "bootstrap", ["admins"], store_url=module_store_url)
    gw = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={"rate_limits": dict(GENEROUS_RATE_LIMITS)},
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {bootstrap}"},
    )
    gw.start()
    try:
        yield gw, bootstrap
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def gateway(started: tuple[GatewayProcess, str]) -> GatewayProcess:
    return started[0]


@pytest.fixture(scope="module")
def admin_key(started: tuple[GatewayProcess, str]) -> str:
    """An admin key created by the CLI while the server runs and creates keys itself."""
    gateway, bootstrap_key = started
    bootstrap = Api(gateway.url, bootstrap_key)
    failures: list[str] = []

    def create_through_api() -> None:
        for i in range(2):
            response = bootstrap("POST", f"{ADMIN}/api-keys", json={"principal": f"concurrent-{i}"})
            if response.status_code != 201:
                failures.append(response.text)

    writer = threading.Thread(target=create_through_api)
    writer.start()
    key = keys_create(gateway.data_dir, "root", ["admins"], store_url=gateway.store_url)
    writer.join()
    assert not failures
    return key


@pytest.fixture(scope="module")
def admin(gateway: GatewayProcess, admin_key: str) -> Api:
    return Api(gateway.url, admin_key)


def _create(admin: Api, principal: str, *groups: str, **extra: Any) -> dict[str, Any]:
    response = admin(
        "POST", f"{ADMIN}/api-keys", json={"principal": principal, "groups": list(groups), **extra}
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


# -- API keys -------------------------------------------------------------------------------------


def test_the_cli_key_works_while_the_server_runs(admin: Api) -> None:
    response = admin("GET", f"{ADMIN}/api-keys", params={"principal": "root"})
    assert response.status_code == 200, response.text
    (record,) = response.json()["api-keys"]
    assert record["groups"] == ["admins"]
    listed = admin("GET", f"{ADMIN}/api-keys").json()["api-keys"]
    assert {"concurrent-0", "concurrent-1", "bootstrap", "root"} <= {r["principal"] for r in listed}


def test_key_life_cycle(gateway: GatewayProcess, admin: Api) -> None:
    created = _create(
        admin, "etl-bot", "writers", kind="service", expires_at="2099-01-01T00:00:00Z", description="etl"
    )
    key_id, key = created["id"], created["key"]
    assert split_key(key)[0] == key_id
    assert created["kind"] == "service"
    assert created["expires_at"].startswith("2099-01-01T00:00:00")
    assert created["revoked_at"] is None

    as_bot = Api(gateway.url, key)
    assert as_bot("GET", "/v1/namespaces").status_code == 200

    shown = admin("GET", f"{ADMIN}/api-keys/{key_id}")
    assert shown.status_code == 200
    assert "key" not in shown.json()
    assert shown.json() == {k: v for k, v in created.items() if k != "key"}

    rotated = admin("POST", f"{ADMIN}/api-keys/{key_id}/rotate")
    assert rotated.status_code == 200, rotated.text
    assert rotated.headers["Cache-Control"] == "no-store"
    new_key = rotated.json()["key"]
    assert split_key(new_key)[0] == key_id
    assert new_key != key
    assert rotated.json()["rotated_at"] is not None
    assert as_bot("GET", "/v1/namespaces").status_code == 401
    assert Api(gateway.url, new_key)("GET", "/v1/namespaces").status_code == 200

    revoked = admin("DELETE", f"{ADMIN}/api-keys/{key_id}")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert "key" not in revoked.json()
    assert Api(gateway.url, new_key)("GET", "/v1/namespaces").status_code == 401
    assert admin("DELETE", f"{ADMIN}/api-keys/{key_id}").status_code == 200  # idempotent

    conflict = admin("POST", f"{ADMIN}/api-keys/{key_id}/rotate")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == 409


def test_create_answers_201_with_the_key_once(admin: Api) -> None:
    response = admin("POST", f"{ADMIN}/api-keys", json={"principal": "once", "groups": ["readers"]})
    assert response.status_code == 201
    body = response.json()
    assert response.headers["Location"] == f"{ADMIN}/api-keys/{body['id']}"
    assert response.headers["Cache-Control"] == "no-store"
    assert body["kind"] == "user"
    secret = split_key(body["key"])[1]
    for path in (f"{ADMIN}/api-keys", f"{ADMIN}/api-keys/{body['id']}"):
        assert secret not in admin("GET", path).text


@pytest.mark.parametrize("key_id", ["aaaaaaaaaaaaaaaa", "not-a-key-id", "AAAAAAAAAAAAAAAA"])
def test_unknown_keys_are_404(admin: Api, key_id: str) -> None:
    for method, suffix in (("GET", ""), ("POST", "/rotate"), ("DELETE", "")):
        response = admin(method, f"{ADMIN}/api-keys/{quote(key_id)}{suffix}")
        assert response.status_code == 404, (method, response.text)
        assert response.json()["error"]["type"] == "NotFoundException"


def test_list_pages_by_key_id(admin: Api) -> None:
    ids = sorted(_create(admin, "pager")["id"] for _ in range(3))
    first = admin("GET", f"{ADMIN}/api-keys", params={"principal": "pager", "pageSize": "2"}).json()
    assert [r["id"] for r in first["api-keys"]] == ids[:2]
    assert first["next-page-token"] == ids[1]
    second = admin(
        "GET",
        f"{ADMIN}/api-keys",
        params={"principal": "pager", "pageSize": "2", "pageToken": first["next-page-token"]},
    ).json()
    assert [r["id"] for r in second["api-keys"]] == ids[2:]
    assert second["next-page-token"] is None
    for record in first["api-keys"] + second["api-keys"]:
        assert "key" not in record
        assert "secret_hash" not in record

    for params in ({"pageSize": "0"}, {"pageSize": "x"}, {"pageSize": "501"}, {"pageToken": "nope"}):
        response = admin("GET", f"{ADMIN}/api-keys", params=params)
        assert response.status_code == 400, params


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[]", "JSON object"),
        (b"", "required"),
        (b'{"principal": "a", "admin": true}', "invalid request: admin: not a field here"),
        (b'{"principal": "a", "groups": "admins"}', "invalid request: groups: expected a list"),
        (b'{"principal": "a", "groups": [1]}', "invalid request: groups[0]: expected a string"),
        (b'{"principal": 7}', "invalid request: principal: expected a string"),
        (
            b'{"principal": "a", "kind": "anonymous"}',
            "invalid request: kind: expected one of user or service",
        ),
        (b'{"principal": " a"}', "not padded"),
        (b'{"principal": "a", "expires_at": "2099-01-01T00:00:00"}', "time zone"),
        (b'{"principal": "a", "expires_at": "2001-01-01T00:00:00Z"}', "future"),
        (b'{"principal": "a", "expires_at": "soon"}', "ISO 8601"),
        (b'{"groups": ["a"]}', "invalid request: principal: is required"),
    ],
)
def test_create_refuses_bad_bodies(admin: Api, body: bytes, message: str) -> None:
    before = len(admin("GET", f"{ADMIN}/api-keys", params={"pageSize": "500"}).json()["api-keys"])
    response = admin("POST", f"{ADMIN}/api-keys", data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "BadRequestException"
    assert message in error["message"]
    after = len(admin("GET", f"{ADMIN}/api-keys", params={"pageSize": "500"}).json()["api-keys"])
    assert after == before


def test_oversized_bodies_are_413(admin: Api) -> None:
    body = b'{"principal": "a", "description": "' + b"x" * 70_000 + b'"}'
    response = admin("POST", f"{ADMIN}/api-keys", data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == 413


def test_only_admins_reach_the_admin_api(gateway: GatewayProcess, admin: Api) -> None:
    reader = Api(gateway.url, _create(admin, "analyst", "readers")["key"])
    for method, path in (
        ("GET", f"{ADMIN}/api-keys"),
        ("POST", f"{ADMIN}/api-keys"),
        ("GET", f"{ADMIN}/policies"),
        ("POST", f"{ADMIN}/explain"),
    ):
        assert reader(method, path, json={"principal": "x"}).status_code == 403, path
    assert Api(gateway.url, None)("GET", f"{ADMIN}/api-keys").status_code == 401


# -- policies and explain ------------------------------------------------------------------------


def test_show_policies(admin: Api) -> None:
    response = admin("GET", f"{ADMIN}/policies")
    assert response.status_code == 200
    body = response.json()
    assert len(body["version"]) == 64
    assert "schema.cedarschema" in body["files"]
    assert set(body["files"]) == set(body["sources"])
    assert "admins-manage-everything" in body["policies"]
    assert body["refused"] is None


def _explain(admin: Api, **body: Any) -> dict[str, Any]:
    response = admin("POST", f"{ADMIN}/explain", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_explain_uses_the_catalogs_grants(admin: Api) -> None:
    created = admin(
        "POST",
        "/v1/namespaces",
        json={"namespace": ["explained"], "properties": {"cedarberg.readers": "bi"}},
    )
    assert created.status_code == 200, created.text
    table = {"type": "table", "namespace": ["explained"], "name": "orders"}

    read = _explain(admin, principal="ann", groups=["bi"], action="loadTable", resource=table)
    assert read["decision"] == "allow"
    assert read["allowed"] is True
    assert read["policy_ids"]
    assert read["policies"][0]["location"]
    assert read["grants_from"] == "catalog"
    assert read["resource"] == 'Cedarberg::Table::"default/explained/orders"'
    assert read["version"] == admin("GET", f"{ADMIN}/policies").json()["version"]
    assert read["restrictions"] == []  # a grant restricts no column or row

    write = _explain(admin, principal="ann", groups=["bi"], action="updateTable", resource=table)
    assert write["decision"] == "deny"
    assert write["policy_ids"] == []

    elsewhere = {**table, "namespace": ["nowhere"]}
    hidden = _explain(admin, principal="ann", groups=["bi"], action="loadTable", resource=elsewhere)
    assert hidden["decision"] == "deny"


def test_explain_with_grants_in_the_request(admin: Api) -> None:
    table = {
        "type": "table",
        "namespace": ["sales"],
        "name": "orders",
        "namespace_properties": [{"cedarberg.writers": "etl"}],
    }
    result = _explain(
        admin,
        principal="etl-bot",
        kind="service",
        groups=["etl"],
        action="updateTable",
        resource=table,
        context={"update_kinds": ["add-snapshot"], "refs": ["dev"]},
    )
    assert result["decision"] == "allow"
    assert result["grants_from"] == "request"
    keys = _explain(
        admin, principal="root", groups=["admins"], action="listApiKeys", resource={"type": "catalog"}
    )
    assert keys["decision"] == "allow"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"principal": "a", "action": "nosuchAction"}, "not a Cedar action"),
        ({"principal": "a", "action": "getToken"}, "not a Cedar action"),
        (
            {"principal": "a", "action": "loadTable", "resource": {"type": "namespace", "namespace": ["x"]}},
            "table",
        ),
        (
            {"principal": "a", "action": "loadTable", "resource": {"type": "table", "namespace": ["x"]}},
            "name",
        ),
        ({"principal": "a", "action": "loadTable", "resource": {"type": "table", "name": "t"}}, "namespace"),
        ({"principal": "a", "action": "getApiKey", "resource": {"type": "api-key", "id": "x"}}, "key id"),
        ({"principal": "a", "action": "showPolicies", "auth_method": "magic"}, "auth_method"),
        (
            {"principal": "a", "action": "showPolicies", "resource": {"type": "planet"}},
            "invalid request: resource.type: expected one of catalog",
        ),
        ({"action": "showPolicies"}, "invalid request: principal: is required"),
    ],
)
def test_explain_refuses_bad_requests(admin: Api, body: dict[str, Any], message: str) -> None:
    response = admin("POST", f"{ADMIN}/explain", json=body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]


def test_explain_reports_the_grants_it_read(admin: Api) -> None:
    properties = {"cedarberg.readers": "bi", "cedarberg.protected-refs": "main"}
    created = admin("POST", "/v1/namespaces", json={"namespace": ["granted"], "properties": properties})
    assert created.status_code == 200, created.text
    child = {"namespace": ["granted", "eu"], "properties": {"cedarberg.writers": "etl"}}
    assert admin("POST", "/v1/namespaces", json=child).status_code == 200
    table = {"type": "table", "namespace": ["granted", "eu"], "name": "orders"}
    live = _explain(admin, principal="ann", groups=["etl"], action="loadTable", resource=table)
    assert live["grants_from"] == "catalog"
    # Node by node, warehouse first, each with its own grants joined with those above it.
    assert live["grants"] == [
        {
            "resource": 'Cedarberg::Warehouse::"default"',
            "readers": [],
            "writers": [],
            "protected_refs": [],
            "schema_locked": False,
        },
        {
            "resource": 'Cedarberg::Namespace::"default/granted"',
            "readers": ["bi"],
            "writers": [],
            "protected_refs": ["main"],
            "schema_locked": False,
        },
        {
            "resource": 'Cedarberg::Namespace::"default/granted.eu"',
            "readers": ["bi"],
            "writers": ["etl"],
            "protected_refs": ["main"],
            "schema_locked": False,
        },
    ]
    assert live["decision"] == "allow"
    stated = _explain(
        admin,
        principal="ann",
        groups=["etl"],
        action="loadTable",
        resource={
            **table,
            "namespace_properties": [{}, {"cedarberg.schema-locked": "true"}],
            "warehouse_properties": {"cedarberg.readers": "auditors"},
        },
    )
    assert stated["grants_from"] == "request"
    assert [(g["readers"], g["writers"], g["schema_locked"]) for g in stated["grants"]] == [
        (["auditors"], [], False),
        (["auditors"], [], False),
        (["auditors"], [], True),
    ]
    assert stated["decision"] == "deny"  # the stated grants, not the registry's, were decided on
    catalog = _explain(admin, principal="ann", groups=["etl"], action="showPolicies")
    assert catalog["grants"] == []


def test_explain_an_api_key_action_looks_up_the_owner(admin: Api) -> None:
    key_id = _create(admin, "owner-1")["id"]
    result = _explain(
        admin,
        principal="root",
        groups=["admins"],
        action="getApiKey",
        resource={"type": "api-key", "id": key_id},
    )
    assert result["decision"] == "allow"
    assert result["resource"] == f'Cedarberg::ApiKey::"{key_id}"'
    missing = admin(
        "POST",
        f"{ADMIN}/explain",
        json={"principal": "root", "action": "getApiKey", "resource": {"type": "api-key", "id": "a" * 16}},
    )
    assert missing.status_code == 404


# -- token endpoint and JWKS ---------------------------------------------------------------------


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_client_credentials_in_the_form_and_as_basic(gateway: GatewayProcess, admin: Api) -> None:
    client_id, secret = split_key(_create(admin, "token-user", "admins")["key"])
    url = f"{gateway.url}/v1/oauth/tokens"

    in_form = requests.post(
        url,
        data={
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_secret": secret,
            "scope": "x",
        },
        timeout=TIMEOUT,
    )
    assert in_form.status_code == 200, in_form.text
    assert in_form.headers["Cache-Control"] == "no-store"
    assert in_form.json()["token_type"] == "bearer"

    # RFC 6749 2.3.1: Basic credentials are form-urlencoded first; "-" may arrive as %2D.
    as_basic = requests.post(
        url,
        data={"grant_type": "client_credentials"},
        headers={"Authorization": _basic(quote(client_id), secret.replace("-", "%2D"))},
        timeout=TIMEOUT,
    )
    assert as_basic.status_code == 200, as_basic.text

    token = as_basic.json()["access_token"]
    jwks = requests.get(f"{gateway.url}/v1/oauth/jwks", timeout=TIMEOUT)
    assert jwks.status_code == 200
    (jwk,) = jwks.json()["keys"]
    assert "d" not in jwk  # public part only
    key = jwt.PyJWK.from_dict(jwk)
    claims = jwt.decode(token, key=key, algorithms=[jwk["alg"]], options={"verify_aud": False})
    assert claims["sub"] == "key:token-user"
    assert Api(gateway.url, token)("GET", f"{ADMIN}/policies").status_code == 200


@pytest.mark.parametrize(
    ("data", "headers", "status", "error"),
    [
        ("grant_type=client_credentials&grant_type=client_credentials", {}, 400, "invalid_request"),
        ("grant_type=password&username=a&password=b", {}, 400, "unsupported_grant_type"),
        ("client_id=x&client_secret=y", {}, 400, "invalid_request"),
        ("grant_type=client_credentials&client_id=abc", {}, 400, "invalid_request"),
        (
            '{"grant_type": "client_credentials"}',
            {"Content-Type": "application/json"},
            400,
            "invalid_request",
        ),
        ("grant_type=client_credentials&" + "a=" + "x" * 20_000, {}, 400, "invalid_request"),
        ("grant_type=client_credentials&%ff=1", {}, 400, "invalid_request"),
        ("grant_type=client_credentials", {"Authorization": "Basic !!!not-base64"}, 401, "invalid_client"),
        (
            "grant_type=client_credentials",
            {"Authorization": "Basic " + base64.b64encode(b"nocolon").decode()},
            401,
            "invalid_client",
        ),
        (
            "grant_type=client_credentials",
            {"Authorization": _basic("aaaaaaaaaaaaaaaa", "A" * 43)},
            401,
            "invalid_client",
        ),
    ],
    ids=[
        "repeated",
        "unsupported-grant",
        "no-grant",
        "no-secret",
        "json-body",
        "oversized",
        "bad-encoding",
        "bad-basic",
        "basic-without-colon",
        "unknown-client",
    ],
)
def test_token_endpoint_errors(
    gateway: GatewayProcess, data: str, headers: dict[str, str], status: int, error: str
) -> None:
    sent = {"Content-Type": "application/x-www-form-urlencoded", **headers}
    response = requests.post(f"{gateway.url}/v1/oauth/tokens", data=data, headers=sent, timeout=TIMEOUT)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error
    assert set(body) == {"error", "error_description"}
    assert response.headers["Cache-Control"] == "no-store"
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Basic")
