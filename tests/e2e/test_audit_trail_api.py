"""The audit trail through the admin API (`GET /admin/v1/audit`) on a real gateway: real requests
by real keys are audited, and an auditor finds them with exact filters, pages through them with
sealed cursors, follows them as they are written (also from a gateway with two workers writing
one file), and opens each decision in Explain. Everyone else is refused; a gateway that writes its
audit log to stdout says so; every bound is a 400.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.gateway import GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create

TIMEOUT = 30
AUDIT_PATH = "/admin/v1/audit"
ORDERS = 'Cedarberg::Table::"default/shop/orders"'
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "required": True, "type": "long"}],
}


@dataclass
class Trail:
    gateway: GatewayProcess
    keys: dict[str, str]  # principal name -> key

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A request of `who` on a new connection (as separate clients would make it)."""
        headers = {"Authorization": f"Bearer {self.keys[who]}"}
        return requests.request(method, self.gateway.url + path, headers=headers, timeout=TIMEOUT, **kwargs)

    def audit(self, who: str = "siem", **params: Any) -> requests.Response:
        return self.call(who, "GET", AUDIT_PATH, params=params)

    def records(self, **params: Any) -> dict[str, Any]:
        answer = self.audit(**params)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


def _start(root: Path, extra: dict[str, Any] | None = None, workers: int = 1) -> Trail:
    data_dir = root / "gateway"
    names = {
        "root": ["admins"],
        "siem": ["audit-readers"],
        "analyst": ["bi"],
        "nobody": ["x"],
        "prober": ["x"],
    }
    keys = {name: keys_create(data_dir, name, groups) for name, groups in names.items()}
    config: dict[str, Any] = {
        "rate_limits": dict(GENEROUS_RATE_LIMITS),
        "audit": {"destination": str(root / "audit" / "audit.jsonl"), "durability": "write"},
        **(extra or {}),
    }
    if workers > 1:
        config["workers"] = workers
    gateway = GatewayProcess(
        data_dir, config=config, anonymous=False, probe_headers={"Authorization": f"Bearer {keys['root']}"}
    )
    gateway.start()
    return Trail(gateway, keys)


def _catalog(trail: Trail) -> None:
    made = trail.call(
        "root",
        "POST",
        "/v1/namespaces",
        json={"namespace": ["shop"], "properties": {"cedarberg.readers": "bi"}},
    )
    assert made.status_code == 200, made.text
    table = trail.call(
        "root", "POST", "/v1/namespaces/shop/tables", json={"name": "orders", "schema": SCHEMA}
    )
    assert table.status_code == 200, table.text


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trail]:
    started = _start(tmp_path_factory.mktemp("audit-trail"))
    try:
        _catalog(started)
        yield started
    finally:
        started.gateway.stop()


def _ids(body: dict[str, Any]) -> list[str]:
    return [record["request_id"] for record in body["records"]]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def test_a_denial_just_made_is_found_by_principal_and_decision(trail: Trail) -> None:
    denied = trail.call("prober", "GET", "/v1/namespaces/shop/tables/orders")
    assert denied.status_code == 404  # a table the prober may not see looks absent
    found = trail.records(principal="key:prober", decision="deny")
    assert [record["request_id"] for record in found["records"]] == [denied.headers["X-Request-ID"]]
    record = found["records"][0]
    assert record["event"] == "decision"
    assert record["action"] == "loadTable"
    assert record["resource"] == ORDERS
    assert record["status"] == 404
    assert record["stream"] == "audit"
    # Opened in Explain: the body decides it again, as the gateway did.
    assert record["explain"]["resource"] == {
        "type": "table",
        "warehouse": "default",
        "namespace": ["shop"],
        "name": "orders",
    }
    assert record["explain_groups_from"] == "api-key"
    explained = trail.call("root", "POST", "/admin/v1/explain", json=record["explain"])
    assert explained.status_code == 200, explained.text
    assert explained.json()["decision"] == "deny"
    assert explained.json()["policy_ids"] == record["policy_ids"]


def test_an_allowed_read_opens_in_explain_with_the_keys_groups(trail: Trail) -> None:
    loaded = trail.call("analyst", "GET", "/v1/namespaces/shop/tables/orders")
    assert loaded.status_code == 200, loaded.text
    found = trail.records(principal="key:analyst", action="loadTable", decision="allow", pageSize=1)
    record = found["records"][0]
    assert record["request_id"] == loaded.headers["X-Request-ID"]
    assert record["explain"]["groups"] == ["bi"]
    explained = trail.call("root", "POST", "/admin/v1/explain", json=record["explain"]).json()
    assert explained["decision"] == "allow"
    assert explained["policy_ids"] == record["policy_ids"] == ["readers-read-granted"]
    # A record that is not a decision has nothing to explain.
    change = trail.records(event="mutation", action="createTable")["records"][0]
    assert change["explain"] is None
    assert change["explain_groups_from"] is None


def test_filters_find_exactly_the_expected_records(trail: Trail) -> None:
    start = _now()
    made = {
        "load": trail.call("analyst", "GET", "/v1/namespaces/shop/tables/orders"),
        "namespace": trail.call("analyst", "GET", "/v1/namespaces/shop"),
        "drop": trail.call("analyst", "DELETE", "/v1/namespaces/shop/tables/orders"),
        "other": trail.call("nobody", "GET", "/v1/namespaces/shop"),
    }
    assert [answer.status_code for answer in made.values()] == [200, 200, 403, 404]
    rid = {name: answer.headers["X-Request-ID"] for name, answer in made.items()}

    assert set(_ids(trail.records(principal="key:analyst", since=start))) == {
        rid["load"],
        rid["namespace"],
        rid["drop"],
    }
    assert _ids(trail.records(principal="key:analyst", since=start, decision="deny")) == [rid["drop"]]
    assert _ids(trail.records(since=start, action="dropTable")) == [rid["drop"]]
    assert set(_ids(trail.records(since=start, resource=ORDERS))) == {rid["load"], rid["drop"]}
    in_shop = trail.records(since=start, resource_prefix='Cedarberg::Namespace::"default/shop')
    assert set(_ids(in_shop)) == {rid["namespace"], rid["other"]}
    assert _ids(trail.records(since=start, principal="key:nobody", event="decision")) == [rid["other"]]
    assert _ids(trail.records(principal="key:analyst", until=start, since=start)) == []
    yesterday = (datetime.now(UTC) - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert _ids(trail.records(principal="key:analyst", until=yesterday)) == []


def test_pages_follow_one_another_with_cursors(trail: Trail) -> None:
    for _ in range(5):
        assert trail.call("analyst", "GET", "/v1/namespaces/shop").status_code == 200
    whole = trail.records(principal="key:analyst", pageSize=500)
    assert whole["next-page-token"] is None
    paged: list[str] = []
    params: dict[str, Any] = {"principal": "key:analyst", "pageSize": 2}
    for _ in range(100):
        page = trail.records(**params)
        assert len(page["records"]) <= 2
        paged += _ids(page)
        if page["next-page-token"] is None:
            break
        params["pageToken"] = page["next-page-token"]
    assert paged == _ids(whole)
    assert len(paged) >= 5


def test_a_tampered_or_borrowed_cursor_is_refused(trail: Trail) -> None:
    page = trail.records(principal="key:analyst", pageSize=1)
    token, follow = page["next-page-token"], page["follow-token"]
    assert token is not None
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    for bad in (flipped, token[:-4], "x", token + "AAAA"):
        refused = trail.audit(principal="key:analyst", pageToken=bad)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == {
            "message": "invalid pageToken",
            "type": "BadRequestException",
            "code": 400,
        }
    assert trail.audit(after=follow[:-2] + "AA").json()["error"]["message"] == "invalid after"
    # A cursor is the caller's own: an admin cannot continue the auditor's listing with it.
    borrowed = trail.audit("root", principal="key:analyst", pageToken=token)
    assert borrowed.status_code == 400
    # The cursor itself works.
    assert trail.audit(principal="key:analyst", pageToken=token).status_code == 200


def test_following_returns_a_record_written_after_the_call_started(trail: Trail) -> None:
    follow = trail.records(principal="key:analyst", pageSize=1)["follow-token"]
    answered: dict[str, Any] = {}

    def wait_for_it() -> None:
        started = time.monotonic()
        answered["response"] = trail.audit(principal="key:analyst", after=follow, wait=20)
        answered["seconds"] = time.monotonic() - started

    waiting = threading.Thread(target=wait_for_it)
    waiting.start()
    time.sleep(1.0)  # the follower is waiting now
    assert "response" not in answered
    made = trail.call("analyst", "GET", "/v1/namespaces/shop")
    waiting.join(TIMEOUT)
    response = answered["response"]
    assert response.status_code == 200, response.text
    assert _ids(response.json()) == [made.headers["X-Request-ID"]]
    assert response.json()["next-page-token"] is None
    assert answered["seconds"] < 15
    # Following on from the new token: nothing more, after waiting a second.
    again = trail.records(principal="key:analyst", after=response.json()["follow-token"], wait=1)
    assert again["records"] == []


def test_the_followers_own_reads_do_not_wake_it(trail: Trail) -> None:
    follow = trail.records(pageSize=1)["follow-token"]
    quiet = trail.records(after=follow, wait=1)  # no filter: only the follower's own reads happened
    assert quiet["records"] == []
    shown = trail.records(after=follow, include_own_reads="true")
    assert shown["records"], shown
    assert {(r["principal"], r["action"]) for r in shown["records"]} == {("key:siem", "readAuditLog")}


def test_only_audit_readers_and_admins_read_the_audit_log(trail: Trail) -> None:
    assert trail.audit("root").status_code == 200
    for who in ("analyst", "nobody"):
        refused = trail.audit(who)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "ForbiddenException"
    anonymous = requests.get(trail.gateway.url + AUDIT_PATH, timeout=TIMEOUT)
    assert anonymous.status_code == 401
    # The refusal is itself in the audit log.
    assert trail.records(principal="key:analyst", action="readAuditLog", decision="deny")["records"]


@pytest.mark.parametrize(
    "params",
    [
        {"pageSize": "0"},
        {"pageSize": "501"},
        {"pageSize": "ten"},
        {"wait": "5"},  # waiting needs a follow-token
        {"since": "yesterday"},
        {"since": "2026-11-27T10:00:00"},  # no time zone
        {"since": "2026-11-27T10:00:00Z", "until": "2026-11-27T09:00:00Z"},
        {"decision": "maybe"},
        {"event": "login"},
        {"resource": ORDERS, "resource_prefix": "Cedarberg::"},
        {"principal": "k" * 2049},
        {"principal": ""},
        {"include_own_reads": "yes"},
    ],
)
def test_bounds_and_bad_queries_are_400(trail: Trail, params: dict[str, str]) -> None:
    refused = trail.audit(**params)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["type"] == "BadRequestException"


def test_waits_past_the_bound_and_repeated_filters_are_400(trail: Trail) -> None:
    follow = trail.records(pageSize=1)["follow-token"]
    assert trail.audit(after=follow, wait="31").status_code == 400
    both = trail.audit(after=follow, pageToken=follow)
    assert both.status_code == 400
    repeated = trail.call("siem", "GET", AUDIT_PATH + "?principal=key:a&principal=key:b")
    assert repeated.status_code == 400
    assert "repeated" in repeated.json()["error"]["message"]


def test_a_gateway_writing_to_stdout_says_it_cannot_read_its_audit_log(tmp_path: Path) -> None:
    trail = _start(tmp_path, {"audit": {"destination": "stdout"}})
    try:
        answer = trail.audit()
        assert answer.status_code == 501, answer.text
        error = answer.json()["error"]
        assert error["type"] == "NotImplementedException"
        assert "audit.destination" in error["message"]
        assert trail.audit("analyst").status_code == 403  # Cedar decides first, as everywhere
    finally:
        trail.gateway.stop()


def test_two_workers_write_one_stream_that_a_follower_sees_whole(tmp_path: Path) -> None:
    trail = _start(tmp_path, workers=2)
    try:
        follow = trail.records(pageSize=1)["follow-token"]
        # Separate connections: the workers share the port, so both answer some of these.
        made = {trail.call("nobody", "GET", "/v1/namespaces/shop").headers["X-Request-ID"] for _ in range(12)}
        seen: list[str] = []
        deadline = time.monotonic() + 20
        while set(seen) != made and time.monotonic() < deadline:
            page = trail.records(principal="key:nobody", after=follow, wait=5)
            seen += _ids(page)
            follow = page["follow-token"]
        assert sorted(seen) == sorted(made)  # each once
    finally:
        trail.gateway.stop()
