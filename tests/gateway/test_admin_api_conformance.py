"""The admin API's OpenAPI document checked against a real gateway, as the catalog is checked
against the Iceberg spec: every admin operation is called (its success and the errors its handler
answers), and every answer is validated against the schema the document gives for that operation
and status. An answer with a status the document does not list, a field it does not declare, a
missing header or a wrong error type fails; so does an operation or an error the document lists
that no call here produced.

One gateway process for the module: authentication required, the bundled policies plus a
restricted permit and a conditional one (so that reviews and explanations carry restrictions and
conditions), and an OIDC issuer (so that the review names principals it cannot list).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest
import requests
from jsonschema import Draft202012Validator, FormatChecker

from cedarberg.gateway.web.app import ALL_ROUTES
from cedarberg.gateway.web.routes.openapi.document import build
from cedarberg.gateway.web.routes.policy_preview import NO_AUDIT_FILE
from tests.support.gateway import GatewayProcess, bundled_policies
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create

TIMEOUT = 30
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "required": True, "type": "long"}],
}
EXTRA_POLICIES = {
    "restricted.cedar": """
@id("analysts-eu-orders")
@columns("id")
@row_filter("id > 0")
permit (principal in Cedarberg::Group::"analysts",
        action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],
        resource == Cedarberg::Table::"default/sales/orders");

@id("tagged-principals-load-orders")
permit (principal, action == Cedarberg::Action::"loadTable",
        resource == Cedarberg::Table::"default/sales/orders")
when { principal.hasTag("email") };
""",
}
ISSUER = {
    "issuer": "https://idp.admin-openapi.test",
    "audiences": ["cedarberg"],
    "jwks_uri": "https://127.0.0.1:9/jwks.json",
    "alias": "corp",
    "groups_allowed": ["bi"],
}


def _date_time(value: object) -> bool:
    """RFC 3339 as the gateway writes it (Python's isoformat), with a time zone."""
    return not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is not None


FORMATS = FormatChecker(formats=())
FORMATS.checks("date-time", raises=ValueError)(_date_time)


class Conformance:
    """Calls of admin operations by operationId, each answer checked against the document."""

    def __init__(self, base: str, document: dict[str, Any]) -> None:
        self.base = base
        self.document = document
        self.operations = {
            op["operationId"]: (path, method, op)
            for path, methods in document["paths"].items()
            for method, op in methods.items()
        }
        self.seen: set[tuple[str, int]] = set()

    def schema(self, schema: dict[str, Any]) -> Draft202012Validator:
        return Draft202012Validator(
            {**schema, "components": self.document["components"]}, format_checker=FORMATS
        )

    def call(
        self,
        operation: str,
        key: str | None,
        expect: int,
        variables: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        """Call `operation` as the holder of `key`; the answer must have status `expect` and
        conform to the document."""
        path, method, spec = self.operations[operation]
        url = self.base + path.format(**{k: quote(v, safe="") for k, v in (variables or {}).items()})
        headers = dict(kwargs.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        response = requests.request(method.upper(), url, headers=headers, timeout=TIMEOUT, **kwargs)
        assert response.status_code == expect, (operation, response.status_code, response.text)
        self.conforms(operation, spec, response)
        if "json" in kwargs and response.ok:  # what the gateway accepted, the document accepts
            body_schema = spec["requestBody"]["content"]["application/json"]["schema"]
            self.schema(body_schema).validate(kwargs["json"])
        self.seen.add((operation, response.status_code))
        return response

    def conforms(self, operation: str, spec: dict[str, Any], response: requests.Response) -> None:
        answer = spec["responses"].get(str(response.status_code))
        assert answer is not None, f"{operation} answered {response.status_code}, which is not documented"
        for header in answer.get("headers", {}):
            assert header in response.headers, (operation, response.status_code, header)
        content = answer.get("content", {}).get("application/json")
        if content is None:
            assert response.content == b"", (operation, response.status_code)
            return
        assert response.headers["Content-Type"].startswith("application/json")
        self.schema(content["schema"]).validate(response.json())


@pytest.fixture(scope="module")
def started(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[tuple[GatewayProcess, str, Path]]:
    """The gateway, its admin key and its policy directory."""
    root = tmp_path_factory.mktemp("admin-openapi")
    data_dir = root / "gateway"
    policies = bundled_policies(root / "policies", EXTRA_POLICIES)
    admin_key = keys_create(data_dir, "root", ["admins"], store_url=module_store_url)
    gateway = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={
            "rate_limits": dict(GENEROUS_RATE_LIMITS),
            "authz": {"policy_dir": str(policies)},
            "oidc": {"issuers": [ISSUER]},
            "audit": {"destination": str(root / "audit" / "audit.jsonl"), "durability": "write"},
        },
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {admin_key}"},
    )
    gateway.start()
    try:
        catalog = requests.Session()
        catalog.headers["Authorization"] = f"Bearer {admin_key}"
        made = catalog.post(
            f"{gateway.url}/v1/namespaces",
            json={"namespace": ["sales"], "properties": {"cedarberg.readers": "bi"}},
            timeout=TIMEOUT,
        )
        assert made.status_code == 200, made.text
        for table in ("orders", "scratch"):
            created = catalog.post(
                f"{gateway.url}/v1/namespaces/sales/tables",
                json={"name": table, "schema": SCHEMA},
                timeout=TIMEOUT,
            )
            assert created.status_code == 200, created.text
        yield gateway, admin_key, policies
    finally:
        gateway.stop()


@pytest.fixture(scope="module")
def conformance(started: tuple[GatewayProcess, str, Path]) -> Conformance:
    gateway, admin_key, _ = started
    served = requests.get(
        f"{gateway.url}/admin/v1/openapi.json",
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=TIMEOUT,
    )
    assert served.status_code == 200, served.text
    return Conformance(gateway.url, served.json())


def test_the_gateway_serves_the_document_built_from_its_code(conformance: Conformance) -> None:
    assert conformance.document == build(ALL_ROUTES)


def test_the_check_refuses_an_answer_with_an_undeclared_field(conformance: Conformance) -> None:
    """The schemas are closed: a record that grew a field (here the secret's hash) fails."""
    record = {
        "id": "aaaaaaaaaaaaaaaa",
        "principal": "p",
        "kind": "user",
        "summary": "a personal key for p",
        "groups": [],
        "created_at": "2026-01-01T00:00:00+00:00",
        "expires_at": None,
        "revoked_at": None,
        "rotated_at": None,
        "previous_secret_expires_at": None,
        "description": "",
    }
    validator = conformance.schema({"$ref": "#/components/schemas/ApiKey"})
    validator.validate(record)
    with pytest.raises(jsonschema.ValidationError, match="secret_hash"):
        validator.validate({**record, "secret_hash": "$argon2id$..."})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**record, "created_at": "2026-01-01T00:00:00"})  # no time zone


def _api_keys(c: Conformance, admin: str) -> str:
    """Create, list, show, rotate and revoke keys; returns a reader's key."""
    reader = c.call("createApiKey", admin, 201, json={"principal": "reader", "groups": ["bi"]}).json()["key"]
    created = c.call(
        "createApiKey",
        admin,
        201,
        json={
            "principal": "analyst",
            "kind": "service",
            "groups": ["analysts"],
            "expires_at": "2099-01-01T00:00:00Z",
            "description": "conformance",
        },
    ).json()
    key_id = created["id"]
    c.call("createApiKey", admin, 400, json={"principal": "a", "admin": True})
    big = b'{"principal": "a", "description": "' + b"x" * 70_000 + b'"}'
    c.call("createApiKey", admin, 413, data=big, headers={"Content-Type": "application/json"})
    c.call("createApiKey", reader, 403, json={"principal": "intruder", "groups": ["admins"]})

    first = c.call("listApiKeys", admin, 200, params={"pageSize": "1"}).json()
    assert isinstance(first["next-page-token"], str)
    c.call("listApiKeys", admin, 200, params={"principal": "analyst"})
    c.call("listApiKeys", admin, 400, params={"pageSize": "0"})
    c.call("listApiKeys", None, 401)

    c.call("getApiKey", admin, 200, {"key_id": key_id})
    # A caller the policies do not let near keys is refused, whether or not the key exists.
    c.call("getApiKey", reader, 403, {"key_id": key_id})
    c.call("rotateApiKey", reader, 403, {"key_id": key_id})
    c.call("getApiKey", reader, 403, {"key_id": "aaaaaaaaaaaaaaaa"})
    c.call("getApiKey", admin, 404, {"key_id": "aaaaaaaaaaaaaaaa"})
    c.call("rotateApiKey", admin, 200, {"key_id": key_id})
    overlapping = c.call("rotateApiKey", admin, 200, {"key_id": key_id}, json={"overlap_seconds": 60}).json()
    assert overlapping["previous_secret_expires_at"] is not None
    c.call("rotateApiKey", admin, 400, {"key_id": key_id}, json={"overlap_seconds": 10**9})
    c.call("rotateApiKey", admin, 400, {"key_id": key_id}, json={"overlap": 60})
    big_rotation = b'{"overlap_seconds": 1, "x": "' + b"x" * 70_000 + b'"}'
    json_type = {"Content-Type": "application/json"}
    c.call("rotateApiKey", admin, 413, {"key_id": key_id}, data=big_rotation, headers=json_type)
    c.call("rotateApiKey", admin, 404, {"key_id": "not-a-key-id"})
    c.call("revokeApiKey", admin, 200, {"key_id": key_id})
    c.call("revokeApiKey", admin, 404, {"key_id": "aaaaaaaaaaaaaaaa"})
    c.call("rotateApiKey", admin, 409, {"key_id": key_id})
    return reader


def _wait_for_refusal(c: Conformance, admin: str, refused: bool) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        shown: dict[str, Any] = c.call("showPolicies", admin, 200).json()
        if (shown["refused"] is not None) == refused or time.monotonic() > deadline:
            return shown
        time.sleep(0.2)


def _policies(c: Conformance, admin: str, gateway: GatewayProcess, policies: Path) -> None:
    shown = _wait_for_refusal(c, admin, refused=False)
    assert "analysts-eu-orders" in shown["policies"]
    broken = policies / "broken.cedar"
    broken.write_text('@id("broken") permit (principal, action, resource) when { nonsense };\n')
    try:
        assert gateway.pid is not None
        os.kill(gateway.pid, signal.SIGHUP)
        refused = _wait_for_refusal(c, admin, refused=True)["refused"]
        assert refused is not None
        assert any("broken.cedar" in problem for problem in refused["problems"]), refused
    finally:
        broken.unlink()
    os.kill(gateway.pid, signal.SIGHUP)
    assert _wait_for_refusal(c, admin, refused=False)["refused"] is None

    orders = {"type": "table", "namespace": ["sales"], "name": "orders"}
    explained = c.call(
        "explainDecision",
        admin,
        200,
        json={"principal": "key:analyst", "groups": ["analysts"], "action": "loadTable", "resource": orders},
    ).json()
    assert explained["decision"] == "allow"
    assert explained["restrictions"], explained
    denied = c.call("explainDecision", admin, 200, json={"principal": "key:x", "action": "createApiKey"})
    assert denied.json()["decision"] == "deny"
    c.call("explainDecision", admin, 400, json={"principal": "key:x", "action": "nope"})
    missing = {"type": "namespace", "warehouse": "nope", "namespace": ["sales"]}
    c.call(
        "explainDecision",
        admin,
        404,
        json={"principal": "key:x", "action": "loadNamespaceMetadata", "resource": missing},
    )
    big = b'{"principal": "key:x", "action": "' + b"x" * 70_000 + b'"}'
    c.call("explainDecision", admin, 413, data=big, headers={"Content-Type": "application/json"})


def _preview(c: Conformance, admin: str, reader: str) -> None:
    """The change preview: a valid candidate (re-deciding what this gateway's audit file recorded),
    a broken one, and the bounds. (A gateway with its audit log on stdout: `_audit_log`.)"""
    opened = '@id("bi-loads-scratch")\npermit (principal in Cedarberg::Group::"bi", action, resource);\n'
    fixture = {
        "principal": 'Cedarberg::User::"key:x"',
        "action": "loadTable",
        "resource": 'Cedarberg::Catalog::"cedarberg"',
    }
    previewed = c.call(
        "previewPolicies",
        admin,
        200,
        json={
            "files": {"opened.cedar": opened},
            "fixtures": [{"expected": "DENY", "name": "bad.json", "fixture": fixture}],
            "decisions": 10,
        },
    ).json()
    assert previewed["valid"], previewed
    assert previewed["decisions"]["audit"]["unavailable"] is None, previewed
    broken = c.call("previewPolicies", admin, 200, json={"files": {"broken.cedar": "permit ("}}).json()
    assert broken["problems"]
    assert broken["decisions"] is None
    c.call("previewPolicies", admin, 400, json={"removed": ["schema.cedarschema"]})
    big = b'{"files": {"big.cedar": "' + b"x" * (3 * 1024 * 1024) + b'"}}'
    c.call("previewPolicies", admin, 413, data=big, headers={"Content-Type": "application/json"})
    c.call("previewPolicies", reader, 403, json={})


def _review(c: Conformance, admin: str) -> None:
    table = c.call("reviewAccess", admin, 200, params={"resource": "default/sales/orders"}).json()
    assert table["not_enumerated"], table
    load = next(action for action in table["actions"] if action["action"] == "loadTable")
    assert any(group["restrictions"] for group in load["groups"]), load
    assert load["conditions"], load
    namespace = c.call(
        "reviewAccess",
        admin,
        200,
        params={"resource": "default/sales", "principal": "key:reader", "group": "bi"},
    ).json()
    assert {obj["name"] for obj in namespace["objects"]} >= {"orders"}
    c.call("reviewAccess", admin, 400, params={"type": "table"})
    c.call("reviewAccess", admin, 404, params={"resource": "default/nowhere"})


def _dropped(c: Conformance, admin: str) -> None:
    catalog = requests.Session()
    catalog.headers["Authorization"] = f"Bearer {admin}"
    scratch = f"{c.base}/v1/namespaces/sales/tables/scratch"

    def drop() -> str:
        assert catalog.delete(scratch, timeout=TIMEOUT).status_code == 204
        listed = c.call("listDroppedObjects", admin, 200, {"warehouse": "default"}).json()["dropped"]
        return str(next(item["drop-id"] for item in listed if item["name"] == "scratch"))

    drop_id = drop()
    c.call("listDroppedObjects", admin, 200, {"warehouse": "default"}, params={"pageSize": "1"})
    c.call("listDroppedObjects", admin, 400, {"warehouse": "default"}, params={"pageSize": "x"})
    c.call("listDroppedObjects", admin, 404, {"warehouse": "nope"})
    once = {"Idempotency-Key": "0b6f4f3e-2d1c-4c5e-9a7e-1f2e3d4c5b6a"}
    restored = c.call("undropObject", admin, 200, {"warehouse": "default", "drop_id": drop_id}, headers=once)
    assert restored.json()["name"] == "scratch"
    c.call("undropObject", admin, 422, {"warehouse": "default", "drop_id": "other"}, headers=once)
    c.call("undropObject", admin, 404, {"warehouse": "default", "drop_id": drop_id})
    drop_id = drop()
    taken = catalog.post(
        f"{c.base}/v1/namespaces/sales/tables", json={"name": "scratch", "schema": SCHEMA}, timeout=TIMEOUT
    )
    assert taken.status_code == 200, taken.text
    c.call("undropObject", admin, 409, {"warehouse": "default", "drop_id": drop_id})


def _directory(c: Conformance, admin: str) -> None:
    put = c.call("putDirectoryUser", admin, 200, {"name": "alice"}, json={"groups": ["bi"]})
    assert put.json()["groups"] == ["bi"]
    c.call("putDirectoryUser", admin, 200, {"name": "bob"}, json={"groups": []})
    c.call("putDirectoryUser", admin, 400, {"name": "carol"}, json={"groups": "bi"})
    big = b'{"groups": ["' + b"x" * 40_000 + b'"]}'
    c.call(
        "putDirectoryUser",
        admin,
        413,
        {"name": "carol"},
        data=big,
        headers={"Content-Type": "application/json"},
    )
    page = c.call("listDirectoryUsers", admin, 200, params={"pageSize": "1"}).json()
    assert page["next-page-token"] == "alice"
    c.call("listDirectoryUsers", admin, 400, params={"pageSize": "0"})
    c.call("getDirectoryUser", admin, 200, {"name": "alice"})
    c.call("getDirectoryUser", admin, 404, {"name": "nobody"})
    c.call("deleteDirectoryUser", admin, 204, {"name": "bob"})
    c.call("deleteDirectoryUser", admin, 404, {"name": "bob"})


def _audit_log(c: Conformance, admin: str, reader: str, tmp_path: Path, store_url: str | None) -> None:
    """Pages, following, bad queries; and a gateway that writes its audit log to stdout (501)."""
    first = c.call("readAuditLog", admin, 200, params={"pageSize": "2"}).json()
    assert first["records"], first
    assert any(record["explain"] is not None for record in first["records"]), first
    c.call("readAuditLog", admin, 200, params={"pageToken": first["next-page-token"], "event": "decision"})
    c.call("readAuditLog", admin, 200, params={"after": first["follow-token"], "wait": "0"})
    c.call("readAuditLog", admin, 400, params={"pageSize": "501"})
    c.call("readAuditLog", admin, 400, params={"after": first["follow-token"][:-2] + "AA"})
    c.call("readAuditLog", reader, 403)
    data_dir = tmp_path / "stdout-gateway"
    key = keys_create(data_dir, "root", ["admins"], store_url=store_url)
    plain = GatewayProcess(
        data_dir,
        store_url=store_url,
        config={"rate_limits": dict(GENEROUS_RATE_LIMITS)},
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {key}"},
    )
    plain.start()
    try:
        elsewhere = Conformance(plain.url, c.document)
        elsewhere.call("readAuditLog", key, 501)
        blind = elsewhere.call("previewPolicies", key, 200, json={"decisions": 1}).json()
        assert blind["decisions"]["audit"]["unavailable"] == NO_AUDIT_FILE
        c.seen |= elsewhere.seen
    finally:
        plain.stop()


def test_every_admin_operation_answers_as_documented(
    started: tuple[GatewayProcess, str, Path],
    conformance: Conformance,
    tmp_path: Path,
    fresh_store_url: str | None,
) -> None:
    gateway, admin, policies = started
    c = conformance
    reader = _api_keys(c, admin)
    _policies(c, admin, gateway, policies)
    _preview(c, admin, reader)
    _review(c, admin)
    _dropped(c, admin)
    c.call("showKms", admin, 200)
    _directory(c, admin)
    _audit_log(c, admin, reader, tmp_path, fresh_store_url)
    c.call("showAdminApi", admin, 200)
    c.call("showAdminApi", reader, 403)
    c.call("showAdminApi", "cbk_aaaaaaaaaaaaaaaa_" + "A" * 43, 401)

    # Every operation was answered with its success and with each error its handler answers.
    missing = []
    for operation, (_, _, spec) in c.operations.items():
        success = next(status for status in spec["responses"] if status.startswith("2"))
        documented_errors = {int(s) for s in spec["responses"] if not s.startswith("2")}
        specific = documented_errors - {401, 403, 419, 429, 503}
        for status in (int(success), *sorted(specific)):
            if (operation, status) not in c.seen:
                missing.append(f"{operation} {status}")
    assert not missing, f"documented but never produced here: {missing}"
    assert {status for _, status in c.seen} >= {401, 403}
