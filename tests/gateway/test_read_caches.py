"""The read-path caches never serve what changed, over real HTTPS with real API keys and tokens.

Every test first warms the caches (the same request answered twice), then changes what the cached
answer depends on through the gateway, and checks the very next request: a revoked key, a policy
change, a grant change, a commit, a drop. Cross-process changes are seen within
`cache.registry_ttl_seconds` (two workers on one registry). A last test runs a workload with the
event loop in debug mode and finds no callback that held the loop.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.gateway import bundled_policies
from tests.support.secure import SecureGateway, split_key
from tests.support.tls import TestPki

TIMEOUT = 30
TABLE_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


@pytest.fixture
def gateway(tmp_path: Path, session_pki: TestPki, fresh_store_url: str | None) -> Iterator[SecureGateway]:
    policy_dir = tmp_path / "policies"
    bundled_policies(policy_dir)
    config = {
        # Reloads only on SIGHUP, so the test decides when the new set arrives; a long registry
        # TTL, so a stale entry would still be fresh when the next request comes.
        "authz": {"policy_dir": str(policy_dir), "reload_interval_seconds": 0},
        "cache": {"registry_ttl_seconds": 60},
    }
    with SecureGateway(tmp_path / "gw", pki=session_pki, config=config, store_url=fresh_store_url) as gw:
        gw.create_namespace("sales", readers=["analysts"], writers=["etl"])
        created = gw.admin.post(
            gw.catalog_url("namespaces/sales/tables"), json={"name": "orders", "schema": TABLE_SCHEMA}
        )
        assert created.status_code == 200, created.text
        yield gw


def _load(gw: SecureGateway, session: requests.Session, **headers: str) -> requests.Response:
    return session.get(gw.catalog_url("namespaces/sales/tables/orders"), headers=headers, timeout=TIMEOUT)


def _warm(gw: SecureGateway, session: requests.Session) -> dict[str, Any]:
    first, second = _load(gw, session), _load(gw, session)
    assert first.status_code == second.status_code == 200, first.text
    assert first.content == second.content
    return dict(second.json())


def test_revoked_api_key_is_refused_at_once(gateway: SecureGateway) -> None:
    key = gateway.create_key("analyst", ["analysts"])
    analyst = gateway.session(key)
    _warm(gateway, analyst)
    key_id, _ = split_key(key)
    revoked = gateway.admin.delete(f"{gateway.url}/admin/v1/api-keys/{key_id}", timeout=TIMEOUT)
    assert revoked.status_code in (200, 204), revoked.text
    refused = _load(gateway, analyst)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "NotAuthorizedException"


def test_policy_change_applies_to_the_next_request(gateway: SecureGateway) -> None:
    token = gateway.token(gateway.create_key("analyst", ["analysts"]))
    analyst = gateway.session(token)  # a gateway JWT: its verification is cached too
    _warm(gateway, analyst)
    before = gateway.admin.get(f"{gateway.url}/admin/v1/policies", timeout=TIMEOUT).json()["version"]
    policy_dir = Path(gateway.process.config["authz"]["policy_dir"])  # type: ignore[index]
    (policy_dir / "freeze.cedar").write_text(
        '@id("analysts-frozen")\nforbid (principal in Cedarberg::Group::"analysts", action, resource);\n'
    )
    assert gateway.process.process is not None
    gateway.process.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while gateway.admin.get(f"{gateway.url}/admin/v1/policies", timeout=TIMEOUT).json()["version"] == before:
        assert time.monotonic() < deadline, "the new policy set was not loaded"
        time.sleep(0.05)
    # The first request after the new set is active: no cached decision of the old set answers.
    refused = _load(gateway, analyst)
    assert refused.status_code in (403, 404), refused.text
    (policy_dir / "freeze.cedar").unlink()
    gateway.process.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while _load(gateway, analyst).status_code != 200:
        assert time.monotonic() < deadline, "removing the forbid policy did not restore access"
        time.sleep(0.05)


def test_grant_change_applies_to_the_next_request(gateway: SecureGateway) -> None:
    analyst = gateway.session(gateway.create_key("analyst", ["analysts"]))
    _warm(gateway, analyst)
    listed = analyst.get(gateway.catalog_url("namespaces"), timeout=TIMEOUT)
    assert ["sales"] in listed.json()["namespaces"]
    properties = gateway.catalog_url("namespaces/sales/properties")
    ungranted = gateway.admin.post(properties, json={"removals": ["cedarberg.readers"], "updates": {}})
    assert ungranted.status_code == 200, ungranted.text
    hidden = _load(gateway, analyst)
    assert hidden.status_code == 404
    assert hidden.json()["error"]["type"] == "NoSuchTableException"
    assert ["sales"] not in analyst.get(gateway.catalog_url("namespaces"), timeout=TIMEOUT).json()[
        "namespaces"
    ]
    regranted = gateway.admin.post(
        properties, json={"removals": [], "updates": {"cedarberg.readers": "analysts"}}
    )
    assert regranted.status_code == 200, regranted.text
    assert _load(gateway, analyst).status_code == 200


def test_commit_rename_and_drop_are_served_at_once(gateway: SecureGateway) -> None:
    writer = gateway.session(gateway.token(gateway.create_key("etl", ["etl"])))
    before = _warm(gateway, writer)
    etag = _load(gateway, writer).headers["ETag"]
    assert _load(gateway, writer, **{"If-None-Match": etag}).status_code == 304
    committed = writer.post(
        gateway.catalog_url("namespaces/sales/tables/orders"),
        json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"stage": "two"}}]},
        timeout=TIMEOUT,
    )
    assert committed.status_code == 200, committed.text
    after = _load(gateway, writer)
    assert after.json()["metadata-location"] == committed.json()["metadata-location"]
    assert after.json()["metadata-location"] != before["metadata-location"]
    assert after.json()["metadata"]["properties"]["stage"] == "two"
    assert after.headers["ETag"] != etag
    assert _load(gateway, writer, **{"If-None-Match": etag}).status_code == 200
    refs = writer.get(gateway.catalog_url("namespaces/sales/tables/orders"), params={"snapshots": "refs"})
    assert refs.json()["metadata"]["properties"]["stage"] == "two"

    tables = gateway.catalog_url("namespaces/sales/tables")
    assert {"namespace": ["sales"], "name": "orders"} in writer.get(tables, timeout=TIMEOUT).json()[
        "identifiers"
    ]
    renamed = gateway.admin.post(
        gateway.catalog_url("tables/rename"),
        json={
            "source": {"namespace": ["sales"], "name": "orders"},
            "destination": {"namespace": ["sales"], "name": "orders_v2"},
        },
    )
    assert renamed.status_code in (200, 204), renamed.text
    assert _load(gateway, writer).status_code == 404
    names = [item["name"] for item in writer.get(tables, timeout=TIMEOUT).json()["identifiers"]]
    assert names == ["orders_v2"]
    moved = writer.get(gateway.catalog_url("namespaces/sales/tables/orders_v2"), timeout=TIMEOUT)
    assert moved.status_code == 200
    assert moved.json()["metadata"]["properties"]["stage"] == "two"
    dropped = writer.delete(gateway.catalog_url("namespaces/sales/tables/orders_v2"), timeout=TIMEOUT)
    assert dropped.status_code == 204, dropped.text
    assert (
        writer.get(gateway.catalog_url("namespaces/sales/tables/orders_v2"), timeout=TIMEOUT).status_code
        == 404
    )
    assert writer.get(tables, timeout=TIMEOUT).json()["identifiers"] == []


def test_another_worker_sees_a_commit_within_the_registry_ttl(
    tmp_path: Path, session_pki: TestPki, fresh_store_url: str | None
) -> None:
    ttl = 0.5
    config = {"workers": 2, "cache": {"registry_ttl_seconds": ttl}}
    with SecureGateway(tmp_path / "gw", pki=session_pki, config=config, store_url=fresh_store_url) as gw:
        gw.create_namespace("sales", writers=["etl"])
        created = gw.admin.post(
            gw.catalog_url("namespaces/sales/tables"), json={"name": "t", "schema": TABLE_SCHEMA}
        )
        assert created.status_code == 200, created.text
        url = gw.catalog_url("namespaces/sales/tables/t")
        for _ in range(20):  # fresh connections reach both workers and warm both caches
            with gw.session(gw.admin_key) as fresh:
                assert fresh.get(url, timeout=TIMEOUT).status_code == 200
        committed = gw.admin.post(
            url, json={"requirements": [], "updates": [{"action": "set-properties", "updates": {"v": "2"}}]}
        )
        assert committed.status_code == 200, committed.text
        location = committed.json()["metadata-location"]
        time.sleep(ttl + 0.2)
        seen = set()
        for _ in range(20):
            with gw.session(gw.admin_key) as fresh:
                seen.add(fresh.get(url, timeout=TIMEOUT).json()["metadata-location"])
        assert seen == {location}


def _slow_callbacks(gw: SecureGateway, round_: str) -> list[str]:
    """The event loop's slow-callback warnings logged while `round_`'s workload ran."""
    start = len(gw.process.log_text())
    namespace = f"sales{round_}"
    gw.create_namespace(namespace, readers=["analysts"], writers=["etl"])
    # Token issuance verifies the key with Argon2 (about 0.1 s of CPU): it must run off the loop.
    for principal, groups in ((f"etl{round_}", ["etl"]), (f"analyst{round_}", ["analysts"])):
        gw.token(gw.create_key(principal, groups))
    writer = gw.session(gw.token(gw.create_key(f"writer{round_}", ["etl"])))
    tables = gw.catalog_url(f"namespaces/{namespace}/tables")
    assert writer.post(tables, json={"name": "events", "schema": TABLE_SCHEMA}).status_code == 200
    table = f"{tables}/events"
    for n in range(10):
        update = {"action": "set-properties", "updates": {"n": str(n)}}
        assert writer.post(table, json={"requirements": [], "updates": [update]}).status_code == 200
        assert writer.get(table).status_code == 200
        assert writer.get(tables).status_code == 200
    assert writer.delete(table).status_code == 204
    return [line for line in gw.process.log_text()[start:].splitlines() if "Executing" in line]


def test_no_callback_holds_the_event_loop(
    tmp_path: Path, session_pki: TestPki, fresh_store_url: str | None
) -> None:
    config = {"slow_callback_warning_ms": 50, "log_format": "text"}
    with SecureGateway(tmp_path / "gw", pki=session_pki, config=config, store_url=fresh_store_url) as gw:
        assert "event loop debug mode" in gw.process.log_text()
        first = _slow_callbacks(gw, "1")
        if first:
            # A loaded machine can stall any one callback past 50 ms; code that blocks the loop
            # (an Argon2 verification, a synchronous read) does it again in a second round.
            second = _slow_callbacks(gw, "2")
            assert not second, "\n".join([*first, "-- and again in the second round:", *second])
