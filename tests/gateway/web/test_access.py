"""Who gets through the pipeline, in process: authentication failures and the failed-authentication
budget, rate limits by address and by principal, Cedar's decisions (hidden is 404, denied is 403,
listings filtered), the effect gate on commits, and the authorization of the operating endpoints.
(The same behaviours over a gateway process: `tests/gateway/test_security_http.py`,
`tests/gateway/test_lockouts.py`, `tests/e2e/test_effect_guards.py`.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cedarberg.gateway.web.keys import LIFECYCLE
from tests.gateway.web.conftest import SCHEMA, InProcessGateway, MakeGateway, bearer

UNKNOWN_KEY = "cbk_aaaaaaaaaaaaaaaa_" + "A" * 43


async def _error_type(response: Any, status: int) -> str:
    assert response.status == status, await response.text()
    document = await response.json()
    assert document["error"]["code"] == status
    return str(document["error"]["type"])


# -- authentication --------------------------------------------------------------------------------


async def test_no_credential_is_a_401_challenge(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(anonymous=False)
    answer = await gw.client.get("/v1/namespaces")
    assert await _error_type(answer, 401) == "NotAuthorizedException"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


async def test_every_refused_credential_looks_the_same(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(anonymous=False)
    good = gw.keys["root"]
    guesses = [
        UNKNOWN_KEY,  # well-formed, unknown id
        "cbk_short",  # malformed
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",  # alg none
        good[:-1] + ("B" if good[-1] != "B" else "C"),  # right id, wrong secret
    ]
    bodies = set()
    for guess in guesses:
        answer = await gw.client.get("/v1/namespaces", headers=bearer(guess))
        assert answer.status == 401
        bodies.add(await answer.text())
    via_header = await gw.client.get("/v1/namespaces", headers={"X-Api-Key": UNKNOWN_KEY})
    bodies.add(await via_header.text())
    assert len(bodies) == 1
    assert (await gw.client.get("/v1/namespaces", headers=bearer(good))).status == 200
    assert (await gw.client.get("/v1/namespaces", headers={"X-Api-Key": good})).status == 200


async def test_past_the_failure_budget_nothing_is_verified(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(
        anonymous=False, config={"rate_limits": {"auth_failures_per_address": "3/minute"}}
    )
    good = gw.keys["root"]
    assert (await gw.client.get("/v1/namespaces", headers=bearer(good))).status == 200
    statuses = [(await gw.client.get("/v1/namespaces", headers=bearer(UNKNOWN_KEY))).status for _ in range(4)]
    assert statuses == [401, 401, 401, 429]
    limited = await gw.client.get("/v1/namespaces", headers=bearer(good))
    assert await _error_type(limited, 429) == "TooManyRequestsException"
    assert int(limited.headers["Retry-After"]) > 0
    # Requests without a credential verify nothing and are not held back by the budget.
    assert (await gw.client.get("/health")).status == 200


# -- rate limits -----------------------------------------------------------------------------------


async def test_the_address_limit_answers_429_with_retry_after(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(config={"rate_limits": {"per_address": "3/minute"}})
    statuses = [(await gw.client.get("/v1/config")).status for _ in range(3)]
    assert statuses == [200, 200, 200]
    limited = await gw.client.get("/v1/namespaces")
    assert await _error_type(limited, 429) == "TooManyRequestsException"
    assert 0 < int(limited.headers["Retry-After"]) <= 60


async def test_the_principal_limit_is_per_principal_and_per_class(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(
        anonymous=False, config={"rate_limits": {"read": "2/minute", "write": "5/minute"}}
    )
    first = gw.as_("root")
    second = gw.as_("root2")
    assert [(await gw.client.get("/v1/namespaces", headers=first)).status for _ in range(2)] == [200, 200]
    limited = await gw.client.get("/v1/namespaces", headers=first)
    assert await _error_type(limited, 429) == "TooManyRequestsException"
    assert int(limited.headers["Retry-After"]) > 0
    # Another principal has a budget of its own; the same principal's writes have theirs.
    assert (await gw.client.get("/v1/namespaces", headers=second)).status == 200
    assert (await gw.client.post("/v1/namespaces", json={"namespace": ["w"]}, headers=first)).status == 200


# -- Cedar's decisions -----------------------------------------------------------------------------


async def _lake(make_gateway: MakeGateway) -> tuple[InProcessGateway, dict[str, str], dict[str, str]]:
    """Namespaces `open` (read by analysts), `hidden` (no grant); an admin and a reader."""
    gw = await make_gateway(anonymous=False)
    admin = gw.as_("root")
    reader = gw.as_("ana")
    await gw.create_namespace("open", {"cedarberg.readers": "analysts"}, headers=admin)
    await gw.create_namespace("hidden", headers=admin)
    for namespace in ("open", "hidden"):
        await gw.create_table(namespace, "t", headers=admin)
    return gw, admin, reader


async def test_a_resource_the_caller_may_not_see_is_a_404(make_gateway: MakeGateway) -> None:
    gw, _admin, reader = await _lake(make_gateway)
    for path, error_type in (
        ("/v1/namespaces/hidden", "NoSuchNamespaceException"),
        ("/v1/namespaces/hidden/tables", "NoSuchNamespaceException"),
        ("/v1/namespaces/hidden/tables/t", "NoSuchTableException"),
    ):
        answer = await gw.client.get(path, headers=reader)
        assert await _error_type(answer, 404) == error_type, path
    # Exactly what a resource that does not exist answers.
    absent = await gw.client.get("/v1/namespaces/nowhere", headers=reader)
    hidden = await gw.client.get("/v1/namespaces/hidden", headers=reader)
    assert (await absent.json())["error"]["type"] == (await hidden.json())["error"]["type"]


async def test_a_visible_resource_denied_is_a_403_and_nothing_changes(make_gateway: MakeGateway) -> None:
    gw, admin, reader = await _lake(make_gateway)
    assert (await gw.client.get("/v1/namespaces/open/tables/t", headers=reader)).status == 200
    refused = await gw.client.post(
        "/v1/namespaces/open/tables", json={"name": "new", "schema": SCHEMA}, headers=reader
    )
    assert await _error_type(refused, 403) == "ForbiddenException"
    dropped = await gw.client.delete("/v1/namespaces/open/tables/t", headers=reader)
    assert await _error_type(dropped, 403) == "ForbiddenException"
    tables = await (await gw.client.get("/v1/namespaces/open/tables", headers=admin)).json()
    assert tables["identifiers"] == [{"namespace": ["open"], "name": "t"}]


async def test_listings_are_filtered_not_denied(make_gateway: MakeGateway) -> None:
    gw, admin, reader = await _lake(make_gateway)
    as_reader = await (await gw.client.get("/v1/namespaces", headers=reader)).json()
    assert as_reader["namespaces"] == [["open"]]
    as_admin = await (await gw.client.get("/v1/namespaces", headers=admin)).json()
    assert sorted(as_admin["namespaces"]) == [["hidden"], ["open"]]


async def test_every_decision_is_audited_with_its_request_id(make_gateway: MakeGateway) -> None:
    gw, _admin, reader = await _lake(make_gateway)
    answer = await gw.client.get("/v1/namespaces/hidden", headers=reader)
    request_id = answer.headers["X-Request-ID"]
    records = [r for r in await gw.audit() if r["request_id"] == request_id]
    assert [(r["event"], r["action"], r["decision"], r["principal"]) for r in records] == [
        ("decision", "loadNamespaceMetadata", "deny", "key:ana")
    ]


# -- the effect gate -------------------------------------------------------------------------------


async def _commit(
    gw: InProcessGateway, headers: dict[str, str], *updates: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    answer = await gw.client.post(
        "/v1/namespaces/finance/tables/gl",
        json={"requirements": [], "updates": list(updates)},
        headers=headers,
    )
    return answer.status, await answer.json()


async def _table(gw: InProcessGateway, headers: dict[str, str]) -> dict[str, Any]:
    answer = await gw.client.get("/v1/namespaces/finance/tables/gl", headers=headers)
    assert answer.status == 200, await answer.text()
    document: dict[str, Any] = await answer.json()
    return document


def _metadata_files(location: str) -> set[str]:
    root = Path(location.removeprefix("file://")) / "metadata"
    return {p.name for p in root.iterdir()} if root.exists() else set()


@pytest.fixture
async def finance(make_gateway: MakeGateway) -> tuple[InProcessGateway, dict[str, str], dict[str, str]]:
    """Table `finance.gl` with one snapshot on `main`, in a namespace whose `main` refs are
    protected; an admin and a writer of the namespace."""
    gw = await make_gateway(anonymous=False)
    admin = gw.as_("root")
    writer = gw.as_("etl-bot")
    await gw.create_namespace(
        "finance", {"cedarberg.writers": "etl", "cedarberg.protected-refs": "main"}, headers=admin
    )
    await gw.create_table("finance", "gl", headers=admin)
    location = (await _table(gw, admin))["metadata"]["location"]
    snapshot = {
        "snapshot-id": 1,
        "sequence-number": 1,
        "timestamp-ms": 1_700_000_000_000,
        "manifest-list": f"{location}/metadata/snap-1.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    status, body = await _commit(
        gw,
        admin,
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1},
    )
    assert status == 200, body
    return gw, admin, writer


async def test_the_effect_gate_refuses_a_writer_moving_a_protected_ref(
    finance: tuple[InProcessGateway, dict[str, str], dict[str, str]],
) -> None:
    gw, admin, writer = finance
    before = await _table(gw, admin)
    files = _metadata_files(before["metadata"]["location"])
    status, body = await _commit(
        gw, writer, {"action": "set-snapshot-ref", "ref-name": "main", "type": "tag", "snapshot-id": 1}
    )
    assert status == 403, body
    assert body["error"]["type"] == "ForbiddenException"
    after = await _table(gw, admin)
    assert after["metadata-location"] == before["metadata-location"]
    assert after["metadata"]["refs"] == before["metadata"]["refs"]
    assert _metadata_files(before["metadata"]["location"]) == files, "nothing written"


async def test_the_effect_gate_allows_an_unprotected_ref(
    finance: tuple[InProcessGateway, dict[str, str], dict[str, str]],
) -> None:
    gw, admin, writer = finance
    before = await _table(gw, admin)
    status, body = await _commit(
        gw,
        writer,
        {"action": "set-snapshot-ref", "ref-name": "etl-staging", "type": "branch", "snapshot-id": 1},
    )
    assert status == 200, body
    after = await _table(gw, admin)
    assert after["metadata-location"] != before["metadata-location"]
    assert after["metadata"]["refs"]["etl-staging"]["snapshot-id"] == 1
    assert after["metadata"]["refs"]["main"] == before["metadata"]["refs"]["main"]


async def test_an_admin_may_move_a_protected_ref(
    finance: tuple[InProcessGateway, dict[str, str], dict[str, str]],
) -> None:
    gw, admin, _writer = finance
    status, body = await _commit(
        gw, admin, {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}
    )
    assert status == 200, body


# -- the operating endpoints -----------------------------------------------------------------------


async def test_health_and_ready_are_public(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(anonymous=False)
    health = await gw.client.get("/health")
    assert health.status == 200
    assert await health.json() == {"status": "ok"}
    ready = await gw.client.get("/ready")
    assert ready.status == 200
    assert await ready.json() == {
        "status": "ready",
        "checks": {"store": "ok", "kms": "ok", "policies": "ok", "audit": "ok", "rate_limits": "ok"},
    }


async def test_ready_says_shutting_down_once_draining(gw: InProcessGateway) -> None:
    gw.app[LIFECYCLE].draining = True
    answer = await gw.client.get("/ready")
    assert await _error_type(answer, 503) == "ServiceUnavailableException"
    document = await answer.json()
    assert document["status"] == "unavailable"
    assert document["error"]["message"] == "not ready: shutting down"
    assert (await gw.client.get("/health")).status == 200


async def test_metrics_need_a_credential_and_a_policy(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(anonymous=False)
    monitoring = gw.as_("prometheus")
    admin = gw.as_("root")
    reader = gw.as_("ana")
    assert await _error_type(await gw.client.get("/metrics"), 401) == "NotAuthorizedException"
    assert await _error_type(await gw.client.get("/metrics", headers=reader), 403) == "ForbiddenException"
    for headers in (monitoring, admin):
        answer = await gw.client.get("/metrics", headers=headers)
        assert answer.status == 200, await answer.text()
        assert answer.headers["Content-Type"].startswith("text/plain")
        assert "cedarberg_http_requests_total" in await answer.text()
    # The monitoring key reads metrics and nothing of the catalog.
    await gw.create_namespace("sales", headers=admin)
    listed = await gw.client.get("/v1/namespaces", headers=monitoring)
    assert (await listed.json())["namespaces"] == []
    refused = await gw.client.post("/v1/namespaces", json={"namespace": ["m"]}, headers=monitoring)
    assert await _error_type(refused, 403) == "ForbiddenException"
