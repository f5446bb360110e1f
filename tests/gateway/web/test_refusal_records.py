"""What the audit log says about refused requests, in process: every credential form's 401 names
the API key id it presented (never its secret) and why it was refused; a denial's record carries
the status the client got, also when it is replayed from a plan. (The floods, over a gateway
process: `tests/e2e/test_audit_answers.py`.)"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from cedarberg.gateway.web.keys import SECURITY
from cedarberg.gateway.web.refusals import NOT_ROUTED
from tests.gateway.web.conftest import InProcessGateway, MakeGateway, bearer

FAKE_ID = "qrstuvwxyz234567"
FAKE_SECRET = "S3cr3t" + "x" * 37
FAKE_KEY = f"cbk_{FAKE_ID}_{FAKE_SECRET}"


async def _refusals(gw: InProcessGateway) -> list[dict[str, Any]]:
    return [r for r in await gw.audit() if r["event"] in {"auth_failure", "throttled"}]


async def test_each_credential_form_records_the_presented_key_id_and_not_the_secret(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(anonymous=False)
    client = gw.client
    assert (await client.get("/v1/namespaces", headers=bearer(FAKE_KEY))).status == 401
    assert (await client.get("/v1/namespaces", headers={"X-Api-Key": FAKE_KEY})).status == 401
    form = {"grant_type": "client_credentials", "client_id": FAKE_ID, "client_secret": FAKE_SECRET}
    assert (await client.post("/v1/oauth/tokens", data=form)).status == 401  # as Spark sends it
    basic = base64.b64encode(f"{FAKE_ID}:{FAKE_SECRET}".encode()).decode()
    as_duckdb = await client.post(
        "/v1/oauth/tokens",
        data={"grant_type": "client_credentials"},
        headers={"Authorization": f"Basic {basic}"},
    )
    assert as_duckdb.status == 401
    assert (await client.get("/v1/namespaces")).status == 401
    records = await _refusals(gw)
    by_action: dict[str, list[tuple[Any, ...]]] = {}
    for r in records:
        assert r["event"] == "auth_failure"
        assert r["status"] == 401
        assert r["detail"]["first_in_window"] is True
        by_action.setdefault(r["action"], []).append(
            (r["detail"].get("presented_key_id"), r["detail"]["reason"], r["detail"]["count"])
        )
    # The two bearer forms share a source (same address, action, reason and key id): one record
    # now, the second counted for the interval's end.
    assert by_action["listNamespaces"] == [(FAKE_ID, "credential refused", 1), (None, "no credential", 1)]
    assert by_action["getToken"] == [(FAKE_ID, "credential refused", 1)]
    written = orjson.dumps(await gw.audit()).decode()  # every record, every field
    assert FAKE_SECRET not in written
    assert FAKE_KEY not in written


async def test_a_denial_records_the_status_the_client_got_fresh_and_replayed(gw: InProcessGateway) -> None:
    await gw.create_namespace("fin")
    await gw.create_table("fin", "t")
    for _ in range(2):  # a repeated read may be answered from the first one's plan: same record
        answer = await gw.client.get("/v1/namespaces/fin/tables/t", headers=gw.as_("nobody"))
        assert answer.status == 404, await answer.text()
    forbidden = await gw.client.post("/v1/namespaces", json={"namespace": ["x"]}, headers=gw.as_("ana"))
    assert forbidden.status == 403, await forbidden.text()
    denials = [r for r in await gw.audit() if r["decision"] == "deny"]
    loads = [r for r in denials if r["action"] == "loadTable"]
    assert [(r["principal"], r["status"], r["detail"]) for r in loads] == [
        ("key:nobody", 404, {"reason": "no policy permits it"}),
        ("key:nobody", 404, {"reason": "no policy permits it"}),
    ]
    assert loads[0]["request_id"] != loads[1]["request_id"]
    creates = [r for r in denials if r["action"] == "createNamespace"]
    assert [(r["principal"], r["status"], r["detail"]) for r in creates] == [
        ("key:ana", 403, {"reason": "no policy permits it"})
    ]


async def test_throttling_by_address_is_counted_before_routing_and_flushed_with_exact_counts(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(config={"rate_limits": {"per_address": "2/minute"}})
    statuses = [(await gw.client.get("/v1/namespaces")).status for _ in range(12)]
    assert statuses.count(429) == 10, statuses
    assert gw.app[SECURITY].refusals.flush() == 1  # the interval's end: one summary
    records = await _refusals(gw)
    assert [(r["event"], r["action"], r["status"], r["principal"]) for r in records] == [
        ("throttled", NOT_ROUTED, 429, None)
    ] * 2
    assert [r["detail"]["count"] for r in records] == [1, 9]
    assert {r["detail"]["reason"] for r in records} == {"client address over its rate limit"}
