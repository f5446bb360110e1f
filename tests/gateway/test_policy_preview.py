"""The policy change preview (POST /admin/v1/policies/preview) on a real gateway process.

Several principals make real requests; their decisions go to the gateway's audit file. An admin
previews a candidate policy set; the flips it lists must be exactly what the gateway then decides
differently once the change is really applied and reloaded (the same requests, made again). The
candidate never decides a request and nothing is written; broken candidates answer FILE:LINE
problems; non-admins are refused; the bounds answer 400 and 413.

One gateway for the module; the test that applies a change for real restores the policy files.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from cedarberg.gateway.authz.redecide import NOT_RECORDED
from tests.support.audit import flushed_audit_log
from tests.support.gateway import REPO_ROOT, GatewayProcess, bundled_policies
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create

TIMEOUT = 30
PREVIEW = "/admin/v1/policies/preview"
MAX_DECISIONS = 2000
MAX_BODY = 64 * 1024
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "required": True, "type": "long"}],
}
READERS_PERMIT = """@id("readers-read-granted")
permit (principal, action in Cedarberg::Action::"read", resource)
when { principal.groups.containsAny(resource.readers) };
"""
OPENED = """@id("nobody-loads-orders")
permit (principal in Cedarberg::Group::"nobody",
        action == Cedarberg::Action::"loadTable",
        resource == Cedarberg::Table::"default/sales/orders");
"""
# A decision record of a gateway from before records carried their Cedar request.
OLD_RECORD = {
    "time": "2026-01-01T00:00:00.000Z",
    "stream": "audit",
    "event": "decision",
    "request_id": "from-an-older-gateway",
    "principal": "key:analyst",
    "principal_kind": "service",
    "auth_method": "api-key",
    "actor": None,
    "client_address": "127.0.0.1",
    "action": "loadTable",
    "resource": 'Cedarberg::Table::"default/sales/orders"',
    "decision": "allow",
    "policy_ids": ["readers-read-granted"],
    "policy_version": "0" * 64,
    "outcome": None,
    "status": None,
    "detail": None,
}


@dataclass
class Deployment:
    gateway: GatewayProcess
    policies: Path
    audit: Path
    keys: dict[str, str]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.keys[who]}", **kwargs.pop("headers", {})}
        return requests.request(method, self.gateway.url + path, headers=headers, timeout=TIMEOUT, **kwargs)

    def preview(self, body: dict[str, Any], who: str = "admin", expect: int = 200) -> dict[str, Any]:
        answer = self.call(who, "POST", PREVIEW, json=body)
        assert answer.status_code == expect, answer.text
        document: dict[str, Any] = answer.json()
        return document

    def active(self) -> dict[str, Any]:
        shown = self.call("admin", "GET", "/admin/v1/policies")
        assert shown.status_code == 200, shown.text
        document: dict[str, Any] = shown.json()
        return document

    def files(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.policies)): p.read_bytes() for p in self.policies.rglob("*") if p.is_file()
        }


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("policy-preview")
    data_dir = root / "gateway"
    policies = bundled_policies(root / "policies")
    shutil.copytree(REPO_ROOT / "policies" / "tests", policies / "tests")
    audit = root / "audit" / "audit.jsonl"
    audit.parent.mkdir()
    audit.write_bytes(orjson.dumps(OLD_RECORD) + b"\n")
    keys = {
        "admin": keys_create(data_dir, "root", ["admins"], store_url=module_store_url),
        "analyst": keys_create(data_dir, "analyst", ["bi"], kind="service", store_url=module_store_url),
        "writer": keys_create(data_dir, "writer", ["etl"], kind="service", store_url=module_store_url),
        "stranger": keys_create(data_dir, "stranger", ["nobody"], kind="service", store_url=module_store_url),
    }
    gateway = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={
            "rate_limits": dict(GENEROUS_RATE_LIMITS),
            "audit": {"destination": str(audit), "durability": "write"},
            "authz": {
                "policy_dir": str(policies),
                "reload_interval_seconds": 0,  # reloaded by SIGHUP only, when the test says
                "preview": {"max_decisions": MAX_DECISIONS, "max_body_bytes": MAX_BODY},
            },
        },
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {keys['admin']}"},
    )
    gateway.start()
    made = Deployment(gateway, policies, audit, keys)
    try:
        for namespace, grants in (("sales", {"cedarberg.readers": "bi", "cedarberg.writers": "etl"}),
                                  ("hr", {"cedarberg.readers": "hr"})):  # fmt: skip
            created = made.call(
                "admin", "POST", "/v1/namespaces", json={"namespace": [namespace], "properties": grants}
            )
            assert created.status_code == 200, created.text
        for namespace, table in (("sales", "orders"), ("hr", "salaries")):
            created = made.call(
                "admin", "POST", f"/v1/namespaces/{namespace}/tables", json={"name": table, "schema": SCHEMA}
            )
            assert created.status_code == 200, created.text
        yield made
    finally:
        gateway.stop()


# Requests of several principals: (who, method, path). Each is decided by one Cedar decision.
WORKLOAD = [
    ("analyst", "GET", "/v1/namespaces/sales/tables/orders"),  # readers-read-granted
    ("analyst", "GET", "/v1/namespaces/sales"),  # readers-read-granted
    ("analyst", "GET", "/v1/namespaces/hr/tables/salaries"),  # no grant: denied (404)
    ("analyst", "GET", "/v1/config"),  # members-discover-warehouses
    ("writer", "GET", "/v1/namespaces/sales/tables/orders"),  # writers-read-granted
    ("writer", "HEAD", "/v1/namespaces/sales/tables/orders"),  # writers-read-granted
    ("stranger", "GET", "/v1/namespaces/sales/tables/orders"),  # no grant: denied (404)
    ("stranger", "GET", "/v1/namespaces/hr/tables/salaries"),  # no grant: denied (404)
]


def _run_workload(d: Deployment, run: str) -> list[int]:
    statuses = []
    for n, (who, method, path) in enumerate(WORKLOAD):
        answer = d.call(who, method, path, headers={"X-Request-ID": f"{run}-request-{n:02d}"})
        statuses.append(answer.status_code)
    return statuses


def _rulings(d: Deployment, run: str) -> dict[int, tuple[str, str, str, str]]:
    """The decision records of one run of the workload: request number -> (principal, action,
    resource, decision)."""
    found: dict[int, tuple[str, str, str, str]] = {}
    for record in flushed_audit_log(d.audit):
        request_id = record["request_id"] or ""
        if record["event"] == "decision" and request_id.startswith(f"{run}-request-"):
            n = int(request_id.rsplit("-", 1)[1])
            assert n not in found, f"request {n} of run {run} made more than one decision"
            found[n] = (record["principal"], record["action"], record["resource"], record["decision"])
    assert sorted(found) == list(range(len(WORKLOAD)))
    return found


def _grants_without_readers(d: Deployment) -> str:
    grants = (d.policies / "grants.cedar").read_text()
    assert READERS_PERMIT in grants
    return grants.replace(READERS_PERMIT, "")


def _sighup_and_wait(d: Deployment, version: str) -> None:
    assert d.gateway.pid is not None
    os.kill(d.gateway.pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while d.active()["version"] != version:
        assert time.monotonic() < deadline, d.active()
        time.sleep(0.1)


def test_a_non_admin_cannot_preview(deployment: Deployment) -> None:
    """Attack: readers, writers and strangers are refused before their body is read: a valid
    body, and one far over the bound, get the same 403."""
    body = {"files": {"opened.cedar": OPENED}}
    for who in ("analyst", "writer", "stranger"):
        refused = deployment.call(who, "POST", PREVIEW, json=body)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "ForbiddenException"
        oversized = deployment.call(who, "POST", PREVIEW, data=b"x" * (MAX_BODY + 1))
        assert oversized.status_code == 403, oversized.text
    denied = [
        r
        for r in flushed_audit_log(deployment.audit)
        if r["action"] == "previewPolicies" and r["decision"] == "deny"
    ]
    assert {r["principal"] for r in denied} == {"key:analyst", "key:writer", "key:stranger"}


def test_the_candidate_never_decides_a_request(deployment: Deployment) -> None:
    """Attack: a stranger whose access the candidate would open is still refused after the
    preview; the active set and the policy files are as they were."""
    before, files = deployment.active()["version"], deployment.files()
    previewed = deployment.preview({"files": {"opened.cedar": OPENED}, "decisions": 50})
    assert previewed["valid"]
    assert previewed["files"] == {"changed": [], "added": ["opened.cedar"], "removed": []}
    refused = deployment.call("stranger", "GET", "/v1/namespaces/sales/tables/orders")
    assert refused.status_code == 404, refused.text
    assert deployment.active()["version"] == before == previewed["current_version"]
    assert deployment.files() == files


def test_an_unchanged_file_flips_nothing(deployment: Deployment) -> None:
    """Control: a candidate identical to the active set re-decides every recent decision and flips
    none."""
    _run_workload(deployment, "unchanged")
    grants = (deployment.policies / "grants.cedar").read_text()
    previewed = deployment.preview({"files": {"grants.cedar": grants}, "decisions": 100})
    assert previewed["valid"]
    assert previewed["unchanged"]
    assert previewed["files"] == {"changed": [], "added": [], "removed": []}
    decisions = previewed["decisions"]
    assert decisions["complete"]
    assert decisions["audit"]["unavailable"] is None
    assert decisions["re_decided"] >= len(WORKLOAD)
    assert (decisions["allow_to_deny"], decisions["deny_to_allow"], decisions["flips"]) == (0, 0, [])
    assert decisions["current_differs_from_recorded"] == 0
    assert previewed["fixtures"]["failed"] == 0
    assert previewed["fixtures"]["passed"] == len(list(deployment.policies.glob("tests/*/*.json")))


def test_a_broken_candidate_answers_its_problems_and_flips_nothing(deployment: Deployment) -> None:
    before, files = deployment.active()["version"], deployment.files()
    broken = '@id("broken")\npermit (principal, action, resource)\nwhen { nonsense };\n'
    previewed = deployment.preview({"files": {"broken.cedar": broken}})
    assert not previewed["valid"]
    assert [problem.split(":")[:2] for problem in previewed["problems"]] == [["broken.cedar", "3"]]
    assert previewed["fixtures"] is None
    assert previewed["decisions"] is None
    assert deployment.active()["version"] == before
    assert deployment.files() == files


def test_the_preview_bounds(deployment: Deployment) -> None:
    too_many = deployment.preview({"decisions": MAX_DECISIONS + 1}, expect=400)
    assert too_many["error"]["type"] == "BadRequestException"
    assert "authz.preview.max_decisions" in too_many["error"]["message"]
    deployment.preview({"decisions": MAX_DECISIONS}, expect=200)
    big = deployment.call("admin", "POST", PREVIEW, json={"files": {"big.cedar": "//" + "x" * MAX_BODY}})
    assert big.status_code == 413, big.text
    assert big.json()["error"]["type"] == "RequestTooLargeException"
    for body in (
        {"files": {"../escape.cedar": "permit (principal, action, resource);"}},
        {"removed": ["schema.cedarschema"]},
        {"removed": ["nothing-like-it.cedar"]},
        {"decisions": -1},
        {"decisions": "10"},
        {"fixtures": [{"expected": "MAYBE", "name": "x.json", "fixture": {}}]},
        {"activate": True},
    ):
        refused = deployment.preview(body, expect=400)
        assert refused["error"]["type"] == "BadRequestException", body
    assert not (deployment.policies.parent / "escape.cedar").exists()


def test_the_preview_predicts_what_the_gateway_then_decides(deployment: Deployment) -> None:
    """A candidate that removes the readers' grant and lets group `nobody` load one table: the
    preview's flips are exactly the decisions that change once the change is applied for real
    and the same requests are made again."""
    _run_workload(deployment, "before")
    grants = _grants_without_readers(deployment)
    candidate = {"grants.cedar": grants, "opened.cedar": OPENED}
    previewed = deployment.preview({"files": candidate, "decisions": MAX_DECISIONS})
    assert previewed["valid"]
    assert not previewed["unchanged"]
    decisions = previewed["decisions"]
    assert decisions["complete"]
    assert not decisions["audit"]["bytes_bound_reached"]
    # Every decision in the file was examined; the one an older gateway wrote cannot be re-decided.
    assert decisions["examined"] < MAX_DECISIONS
    assert decisions["not_re_decidable_reasons"] == {NOT_RECORDED: 1}
    failed = {r["path"] for r in previewed["fixtures"]["results"] if not r["passed"]}
    assert failed == {
        "tests/ALLOW/reader-loads-granted-table.json",
        "tests/ALLOW/reader-lists-granted-namespace.json",
        "tests/ALLOW/partner-analysts-read-a-scoped-grant.json",
    }
    predicted = {
        int(flip["request_id"].rsplit("-", 1)[1]): (
            flip["principal"],
            flip["action"],
            flip["resource"],
            flip["candidate"]["decision"],
        )
        for flip in decisions["flips"]
        if flip["request_id"].startswith("before-request-")
    }
    before = _rulings(deployment, "before")
    # The same flips for the earlier runs of the workload: the prediction holds for each run.
    assert len(decisions["flips"]) == decisions["allow_to_deny"] + decisions["deny_to_allow"]

    originals = {name: (deployment.policies / name).read_bytes() for name in ("grants.cedar",)}
    try:
        (deployment.policies / "grants.cedar").write_text(grants)
        (deployment.policies / "opened.cedar").write_text(OPENED)
        _sighup_and_wait(deployment, previewed["candidate_version"])
        _run_workload(deployment, "after")
        after = _rulings(deployment, "after")
    finally:
        for name, content in originals.items():
            (deployment.policies / name).write_bytes(content)
        (deployment.policies / "opened.cedar").unlink()
        _sighup_and_wait(deployment, previewed["current_version"])

    changed = {n: after[n] for n in before if before[n] != after[n]}
    assert predicted == changed
    assert {n: ruling[3] for n, ruling in changed.items()} == {0: "deny", 1: "deny", 6: "allow"}
    for flip in decisions["flips"]:
        assert flip["current"]["decision"] == flip["recorded"]
        assert flip["current"]["decision"] != flip["candidate"]["decision"]
