"""Errors that say what to fix, on a real gateway: credentials sent in the wrong form, a catalog URI
ending in /v1, and admin bodies that do not validate (issue 29, part 4).

One gateway process for the module, plain HTTP on loopback, with the anonymous test admin
configured (so a credential sent in the wrong form is seen to be refused, not quietly served as
anonymous) and generous rate limits (this module fails authentication on purpose, many times).
Messages are chosen by the shape of what was sent, so each is checked to be the same for an
existing key and an unknown one, and never to echo a secret.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from pyiceberg.catalog import load_catalog

from tests.support.gateway import GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, split_key

TIMEOUT = 30
TOKENS = "/v1/oauth/tokens"
BEARER_FORM = "'Authorization: Bearer <token>'"
CREDENTIAL_FORM = "the credential is '<key id>:<secret>'"
URI_HINT = "the catalog URI is the gateway's root (e.g. https://host:8181), without /v1"
# Any Python class name of the admin body models, or pydantic's wording, in an error is a leak.
_INTERNALS = re.compile(
    r"instance of|Input should|ExplainResource|ExplainRequest|ExplainContext|CreateKeyRequest|"
    r"PutUserRequest|BaseModel|pydantic|dict\[|list\["
)


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[GatewayProcess]:
    data_dir = tmp_path_factory.mktemp("guidance") / "gateway"
    limits = {**GENEROUS_RATE_LIMITS, "auth_failures_per_address": "100000/minute"}
    gw = GatewayProcess(data_dir, store_url=module_store_url, config={"rate_limits": limits})
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def key(gateway: GatewayProcess) -> str:
    return gateway.admin_key


def _get(gateway: GatewayProcess, path: str, headers: dict[str, str] | None = None) -> requests.Response:
    return requests.get(f"{gateway.url}{path}", headers=headers or {}, timeout=TIMEOUT)


def _token(
    gateway: GatewayProcess, form: dict[str, str], auth: tuple[str, str] | None = None
) -> requests.Response:
    return requests.post(
        f"{gateway.url}{TOKENS}",
        data={"grant_type": "client_credentials", "scope": "catalog", **form},
        auth=auth,
        timeout=TIMEOUT,
    )


def _unknown_like(key: str) -> str:
    """A key of the same shape that no one holds (another id, same secret)."""
    key_id, secret = split_key(key)
    other = "a" * 16 if key_id != "a" * 16 else "b" * 16
    return f"cbk_{other}_{secret}"


# -- the token endpoint ---------------------------------------------------------------------------


def test_the_whole_key_as_the_credential_gets_a_token(gateway: GatewayProcess, key: str) -> None:
    """Control: `credential=cbk_...` (Iceberg clients send it as a secret without an id), the
    same in HTTP Basic, and `<id>:<secret>` all get a token that authenticates."""
    key_id, secret = split_key(key)
    for answer in (
        _token(gateway, {"client_secret": key}),
        _token(gateway, {}, auth=("", key)),
        _token(gateway, {"client_id": key_id, "client_secret": secret}),
    ):
        assert answer.status_code == 200, answer.text
        token = answer.json()["access_token"]
        assert _get(gateway, "/v1/config", {"Authorization": f"Bearer {token}"}).status_code == 200


def test_pyiceberg_takes_the_whole_key_as_its_credential(gateway: GatewayProcess, key: str) -> None:
    catalog = load_catalog(
        "guidance",
        **{"type": "rest", "uri": gateway.url, "credential": key, "scope": "catalog"},
        **{"oauth2-server-uri": f"{gateway.url}{TOKENS}"},
    )
    catalog.create_namespace("whole_key_credential")
    assert ("whole_key_credential",) in catalog.list_namespaces()


def test_a_credential_of_the_wrong_shape_is_told_the_form(gateway: GatewayProcess, key: str) -> None:
    key_id, secret = split_key(key)
    missing = _token(gateway, {"client_secret": secret})  # the secret alone, no id
    assert missing.status_code == 400
    assert missing.json()["error"] == "invalid_request"
    assert CREDENTIAL_FORM in missing.json()["error_description"]
    for form in (
        {"client_id": "etl", "client_secret": secret},  # the principal's name as the id
        {"client_id": key_id, "client_secret": key},  # the whole key after the id
        {"client_id": key, "client_secret": secret},
    ):
        answer = _token(gateway, form)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"].startswith("Basic ")
        body = answer.json()
        assert body["error"] == "invalid_client"
        assert CREDENTIAL_FORM in body["error_description"]
        assert secret not in answer.text


def test_token_endpoint_messages_do_not_tell_which_keys_exist(gateway: GatewayProcess, key: str) -> None:
    """Attack: an enumerating client compares answers for a real key id and an unknown one."""
    key_id, secret = split_key(key)
    unknown_id, _ = split_key(_unknown_like(key))
    wrong_secret = "B" * 42 + "A"
    for form_of in (
        lambda kid: {"client_id": kid, "client_secret": wrong_secret},  # well formed, wrong
        lambda kid: {"client_id": kid, "client_secret": "short"},  # malformed secret
    ):
        real, unknown = _token(gateway, form_of(key_id)), _token(gateway, form_of(unknown_id))
        assert real.status_code == unknown.status_code == 401
        assert real.json() == unknown.json()
    assert _token(gateway, {"client_id": key_id, "client_secret": wrong_secret}).json() == {
        "error": "invalid_client",
        "error_description": "Client authentication failed",
    }
    assert _token(gateway, {"client_id": key_id, "client_secret": secret}).status_code == 200


# -- bearer credentials on catalog routes ---------------------------------------------------------


def test_a_client_credential_sent_as_a_bearer_token_names_the_token_endpoint(
    gateway: GatewayProcess, key: str
) -> None:
    answers = []
    for presented in (key, _unknown_like(key)):
        key_id, secret = split_key(presented)
        answer = _get(gateway, "/v1/config", {"Authorization": f"Bearer {key_id}:{secret}"})
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="cedarberg"'
        error = answer.json()["error"]
        assert error["type"] == "NotAuthorizedException"
        assert "POST /v1/oauth/tokens" in error["message"]
        assert "credential=<key id>:<secret>" in error["message"]
        assert secret not in answer.text
        answers.append(answer.json())
    assert answers[0] == answers[1]  # the same whether the key exists or not


def test_a_credential_without_bearer_is_refused_not_served_anonymously(
    gateway: GatewayProcess, key: str
) -> None:
    """Attack: a request whose credential is sent in the wrong form would otherwise run as the
    configured anonymous principal; it is refused naming `Authorization: Bearer <token>`."""
    key_id, secret = split_key(key)
    basic = base64.b64encode(f"{key_id}:{secret}".encode()).decode()
    for header in (key, f"Basic {basic}", f"Token {key}", "Bearer", "Bearer   "):
        answer = _get(gateway, "/v1/namespaces", {"Authorization": header})
        assert answer.status_code == 401, header
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="cedarberg"'
        message = answer.json()["error"]["message"]
        assert BEARER_FORM in message
        assert secret not in answer.text
    assert "POST /v1/oauth/tokens" in _get(gateway, "/v1/config", {"Authorization": f"Basic {basic}"}).text
    # Control: no credential is the anonymous principal; a bearer key is its own principal.
    assert _get(gateway, "/v1/namespaces").status_code == 200
    assert _get(gateway, "/v1/namespaces", {"Authorization": f"Bearer {key}"}).status_code == 200


def test_an_unknown_well_formed_bearer_key_stays_generic(gateway: GatewayProcess, key: str) -> None:
    answer = _get(gateway, "/v1/config", {"Authorization": f"Bearer {_unknown_like(key)}"})
    assert answer.status_code == 401
    assert answer.json()["error"]["message"] == "Not authorized"


# -- the catalog URI ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/v1/config"), ("GET", "/v1/v1/namespaces"), ("POST", "/v1/v1/oauth/tokens")],
)
def test_a_catalog_uri_ending_in_v1_is_named(
    gateway: GatewayProcess, key: str, method: str, path: str
) -> None:
    answer = requests.request(
        method, f"{gateway.url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
    )
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == 404
    assert URI_HINT in error["message"]
    # Control: the same requests under the root answer.
    assert _get(gateway, path.removeprefix("/v1"), {"Authorization": f"Bearer {key}"}).status_code in (
        200,
        405,
    )


def test_pyiceberg_with_a_v1_uri_is_told_the_catalog_uri(gateway: GatewayProcess, key: str) -> None:
    with pytest.raises(Exception, match=re.escape(URI_HINT)):
        load_catalog("v1-suffix", type="rest", uri=f"{gateway.url}/v1", token=key)


# -- admin bodies ---------------------------------------------------------------------------------

_BAD_BODIES: list[tuple[str, str, dict[str, Any], str, str]] = [
    # method, path, body, the field path named, what the message says was expected
    (
        "POST",
        "/admin/v1/explain",
        {"principal": "a", "action": "loadTable", "resource": 5},
        "resource",
        "an object",
    ),
    (
        "POST",
        "/admin/v1/explain",
        {"principal": "a", "action": "loadTable", "resource": {"type": "bucket"}},
        "resource.type",
        "one of catalog, warehouse, namespace, table, view or api-key",
    ),
    (
        "POST",
        "/admin/v1/explain",
        {"principal": "a", "action": "loadTable", "resource": {"type": "table", "colour": "red"}},
        "resource.colour",
        "not a field here (the fields are type, warehouse",
    ),
    (
        "POST",
        "/admin/v1/explain",
        {"principal": "a", "action": "loadTable", "resource": {"type": "table", "namespace": ["a", 1]}},
        "resource.namespace[1]",
        "a string",
    ),
    ("POST", "/admin/v1/explain", {"principal": 7, "action": "loadTable"}, "principal", "a string"),
    ("POST", "/admin/v1/explain", {"action": "loadTable"}, "principal", "is required"),
    (
        "POST",
        "/admin/v1/explain",
        {"principal": "a", "action": "loadTable", "context": {"creates": "yes"}},
        "context.creates",
        "true or false",
    ),
    (
        "POST",
        "/admin/v1/explain",
        {"principal": "a", "action": "loadTable", "context": []},
        "context",
        "an object",
    ),
    ("POST", "/admin/v1/api-keys", {"principal": "a", "kind": "robot"}, "kind", "one of user or service"),
    ("POST", "/admin/v1/api-keys", {"principal": "a", "groups": "admins"}, "groups", "a list"),
    ("POST", "/admin/v1/api-keys", {"principal": ""}, "principal", "at least 1 character"),
    ("POST", "/admin/v1/api-keys", {"principal": "a", "groups": [1]}, "groups[0]", "a string"),
    ("PUT", "/admin/v1/users/alice", {"groups": "analysts"}, "groups", "a list"),
    ("PUT", "/admin/v1/users/alice", {}, "groups", "is required"),
    (
        "PUT",
        "/admin/v1/users/alice",
        {"groups": [], "role": "x"},
        "role",
        "not a field here (the fields are groups)",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "expected"),
    _BAD_BODIES,
    ids=[f"{m} {p.rsplit('/', 1)[-1]} {f}" for m, p, _b, f, _e in _BAD_BODIES],
)
def test_a_bad_admin_body_names_the_field_and_what_was_expected(
    gateway: GatewayProcess, key: str, method: str, path: str, body: dict[str, Any], field: str, expected: str
) -> None:
    answer = requests.request(
        method, f"{gateway.url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "BadRequestException"
    assert error["message"].startswith(f"invalid request: {field}: ")
    assert expected in error["message"]
    assert _INTERNALS.search(error["message"]) is None, error["message"]


def test_good_admin_bodies_are_accepted(gateway: GatewayProcess, key: str) -> None:
    """Control: the bodies the bad ones were made from work."""
    auth = {"Authorization": f"Bearer {key}"}
    explain = {
        "principal": "a",
        "action": "loadTable",
        "resource": {"type": "table", "namespace": ["n"], "name": "t"},
    }
    answer = requests.post(f"{gateway.url}/admin/v1/explain", json=explain, headers=auth, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.json()["decision"] == "deny"
    created = requests.post(
        f"{gateway.url}/admin/v1/api-keys", json={"principal": "a", "kind": "service", "groups": ["x"]},
        headers=auth, timeout=TIMEOUT,
    )  # fmt: skip
    assert created.status_code == 201, created.text
    put = requests.put(
        f"{gateway.url}/admin/v1/users/alice", json={"groups": ["analysts"]}, headers=auth, timeout=TIMEOUT
    )
    assert put.status_code == 200, put.text
