"""Request plans (`gateway.web.replay`): a read replayed from its plan answers, audits and counts
exactly as the request it was recorded from, and every change that could alter the outcome ends
the plan — a grant removed, a policy reload, a key revoked or rotated, a commit, a token's expiry.

Each invalidation test is an attack test (the reader keeps asking after losing access and must not
be answered from the plan) beside its control (the same requests before the change are replayed).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from cedarberg.gateway.authz.operations import ActionGroup
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from cedarberg.gateway.web.keys import METRICS, SECURITY
from cedarberg.gateway.web.replay import PlanCache
from tests.gateway.web.conftest import InProcessGateway, MakeGateway, bearer

TABLE = "/v1/namespaces/shared/tables/t"
_VOLATILE = {"time", "request_id"}


async def _token(gw: InProcessGateway, principal: str) -> dict[str, str]:
    """Bearer headers with a gateway token issued for the principal's API key."""
    key_id, secret = gw.keys[principal].removeprefix("cbk_").split("_", 1)
    answer = await gw.client.post(
        "/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": secret},
    )
    assert answer.status == 200, await answer.text()
    return bearer((await answer.json())["access_token"])


async def _gateway(make_gateway: MakeGateway, config: dict[str, Any] | None = None) -> InProcessGateway:
    gw = await make_gateway(anonymous=False, config={"rate_limits": {"enabled": False}, **(config or {})})
    root = gw.as_("root")
    await gw.create_namespace("shared", {"cedarberg.readers": "analysts", "cedarberg.writers": "etl"}, root)
    await gw.create_table("shared", "t", root)
    return gw


def _plans(gw: InProcessGateway) -> PlanCache:
    return gw.app[SECURITY].plans


async def _load(gw: InProcessGateway, headers: dict[str, str]) -> tuple[int, str | None, bytes]:
    answer = await gw.client.get(TABLE, headers=headers)
    return answer.status, answer.headers.get("ETag"), await answer.read()


async def test_a_repeated_read_is_replayed_with_the_same_answer_audit_and_metrics(
    make_gateway: MakeGateway,
) -> None:
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    plans = _plans(gw)
    fresh = await _load(gw, ana)
    assert fresh[0] == 200
    assert (plans.recorded, plans.replayed) == (1, 0)
    replayed = await _load(gw, ana)
    assert (plans.recorded, plans.replayed) == (1, 1)
    assert replayed == fresh

    decisions = [r for r in await gw.audit() if r["event"] == "decision" and r["action"] == "loadTable"]
    assert len(decisions) == 2
    first, second = ({k: v for k, v in r.items() if k not in _VOLATILE} for r in decisions)
    assert first == second
    assert first["decision"] == "allow"
    assert first["principal"] == "key:ana"
    assert decisions[0]["request_id"] != decisions[1]["request_id"]

    exposition = gw.app[METRICS].exposition().decode()
    assert 'cedarberg_authz_decisions_total{action="loadTable",outcome="allow"} 2.0' in exposition


async def test_a_replayed_read_answers_304_to_its_etag(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    _status, etag, _body = await _load(gw, ana)
    assert etag is not None
    answer = await gw.client.get(TABLE, headers={**ana, "If-None-Match": etag})
    assert answer.status == 304
    assert answer.headers["ETag"] == etag
    assert _plans(gw).replayed == 1


async def test_a_denial_is_replayed_as_a_denial_and_audited_each_time(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway)
    nobody = await _token(gw, "nobody")
    statuses = [(await gw.client.get(TABLE, headers=nobody)).status for _ in range(3)]
    assert statuses == [404, 404, 404]  # hidden: the namespace grants nobody anything
    assert _plans(gw).replayed == 2
    denials = [r for r in await gw.audit() if r["event"] == "decision" and r["principal"] == "key:nobody"]
    assert len(denials) == 3
    assert {r["decision"] for r in denials} == {"deny"}


async def test_removing_a_grant_ends_the_plan(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    assert [(await _load(gw, ana))[0] for _ in range(2)] == [200, 200]
    assert _plans(gw).replayed == 1
    removed = await gw.client.post(
        "/v1/namespaces/shared/properties", json={"removals": ["cedarberg.readers"]}, headers=gw.as_("root")
    )
    assert removed.status == 200, await removed.text()
    assert (await _load(gw, ana))[0] in (403, 404)
    assert _plans(gw).replayed == 1


async def test_a_commit_ends_the_plan_and_the_next_read_has_the_new_etag(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    _status, before, _body = await _load(gw, ana)
    assert (await _load(gw, ana))[1] == before
    committed = await gw.client.post(
        TABLE,
        json={"updates": [{"action": "set-properties", "updates": {"owner": "etl"}}], "requirements": []},
        headers=await _token(gw, "etl-bot"),
    )
    assert committed.status == 200, await committed.text()
    status, after, body = await _load(gw, ana)
    assert status == 200
    assert after != before
    assert b'"owner":"etl"' in body


@pytest.mark.parametrize("change", ["revoke", "rotate"])
async def test_revoking_or_rotating_the_key_ends_its_tokens_plans(
    make_gateway: MakeGateway, change: str
) -> None:
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    assert [(await _load(gw, ana))[0] for _ in range(2)] == [200, 200]
    key_id = gw.keys["ana"].removeprefix("cbk_").split("_", 1)[0]
    root = gw.as_("root")
    if change == "revoke":
        answer = await gw.client.delete(f"/admin/v1/api-keys/{key_id}", headers=root)
    else:
        answer = await gw.client.post(f"/admin/v1/api-keys/{key_id}/rotate", headers=root)
    assert answer.status == 200, await answer.text()
    assert (await _load(gw, ana))[0] == 401
    assert _plans(gw).replayed == 1


async def test_a_policy_reload_ends_the_plan(make_gateway: MakeGateway, tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(BUNDLED_POLICY_DIR, policies)
    gw = await _gateway(make_gateway, {"authz": {"policy_dir": str(policies)}})
    ana = await _token(gw, "ana")
    assert [(await _load(gw, ana))[0] for _ in range(2)] == [200, 200]
    (policies / "no-analysts.cedar").write_text(
        '@id("no-analysts-load")\n'
        'forbid (principal, action == Cedarberg::Action::"loadTable", resource)\n'
        'when { principal.groups.contains("analysts") };\n'
    )
    await gw.app[SECURITY].reload_policies()
    assert (await _load(gw, ana))[0] == 403
    assert _plans(gw).replayed == 1


async def test_a_plan_ends_when_its_token_expires(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway)
    issued = (await _token(gw, "ana"))["Authorization"].removeprefix("Bearer ")
    claims = jwt.decode(issued, options={"verify_signature": False})
    signing_key = load_pem_private_key((gw.settings.data_dir / "token-signing-key.pem").read_bytes(), None)
    now = int(time.time())
    # Expires in 2 s; the verifier's leeway still accepts it afterwards, a plan must not.
    short = jwt.encode(
        {**claims, "iat": now, "nbf": now, "exp": now + 2},
        signing_key,  # type: ignore[arg-type]
        algorithm="EdDSA",
        headers=jwt.get_unverified_header(issued),
    )
    headers = bearer(short)
    assert [(await _load(gw, headers))[0] for _ in range(2)] == [200, 200]
    assert _plans(gw).replayed == 1
    await asyncio.sleep(max(0.0, now + 2.1 - time.time()))
    assert [(await _load(gw, headers))[0] for _ in range(2)] == [200, 200]
    assert _plans(gw).replayed == 1  # both decided afresh, and no plan kept past the expiry


async def test_credential_requests_are_never_replayed(make_gateway: MakeGateway) -> None:
    """Asking for storage credentials is decided afresh every time (API keys, like every other
    credential form, are replayed: tests/gateway/web/test_replay_credential_forms.py)."""
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    asks = {**ana, "X-Iceberg-Access-Delegation": "vended-credentials"}
    for _ in range(2):
        await gw.client.get(TABLE, headers=asks)
    assert (_plans(gw).recorded, _plans(gw).replayed) == (0, 0)


async def test_another_client_address_or_credential_gets_a_plan_of_its_own(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway)
    first, second = await _token(gw, "ana"), await _token(gw, "etl-bot")
    for headers in (first, second, first, second):
        assert (await _load(gw, headers))[0] == 200
    assert (_plans(gw).recorded, _plans(gw).replayed) == (2, 2)


async def test_plans_are_bounded_in_bytes(make_gateway: MakeGateway) -> None:
    gw = await _gateway(make_gateway, {"cache": {"plan_max_bytes": 8192}})
    ana = await _token(gw, "ana")
    for n in range(30):  # 30 distinct request keys (an unknown query parameter is ignored)
        assert (await gw.client.get(f"{TABLE}?n={n}", headers=ana)).status == 200
    plans = _plans(gw)
    assert plans.recorded == 30
    assert 0 < plans.estimated_bytes <= 8192
    assert 0 < len(plans) < 30


@pytest.mark.parametrize(
    "path", ["/v1/namespaces/shared", "/v1/namespaces", "/v1/namespaces/shared/tables", TABLE]
)
async def test_the_reads_engines_repeat_are_replayed(make_gateway: MakeGateway, path: str) -> None:
    gw = await _gateway(make_gateway)
    ana = await _token(gw, "ana")
    answers = [await gw.client.get(path, headers=ana) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 200]
    bodies = [await a.read() for a in answers]
    assert bodies[0] == bodies[1] == bodies[2]
    assert (_plans(gw).recorded, _plans(gw).replayed) == (1, 2)


async def test_a_replay_checks_the_failure_budget_exactly_when_a_fresh_request_would(
    make_gateway: MakeGateway,
) -> None:
    """Over its failed-authentication budget, an address is refused anything with a credential,
    replayed or not (attack); anonymous reads, which present none, go on in both ways (control)."""
    # Registry reads kept for a minute: the plans here must not end by the registry cache's age
    # while a token is issued (Argon2) on a busy machine.
    gw = await make_gateway(
        config={
            "rate_limits": {"auth_failures_per_address": "2/minute"},
            "cache": {"registry_ttl_seconds": 60},
        }
    )
    await gw.create_namespace("shared", {"cedarberg.readers": "analysts"})
    await gw.create_table("shared", "t")
    assert [(await _load(gw, {}))[0] for _ in range(2)] == [200, 200]  # anonymous: recorded, replayed
    token = await _token(gw, "ana")
    assert (await _load(gw, token))[0] == 200  # recorded
    assert (_plans(gw).recorded, _plans(gw).replayed) == (2, 1)
    bad = bearer("cbk_aaaaaaaaaaaaaaaa_" + "A" * 43)
    assert [(await gw.client.get(TABLE, headers=bad)).status for _ in range(3)] == [401, 401, 429]
    assert (await _load(gw, token))[0] == 429  # its plan is valid, and the budget still refuses
    assert _plans(gw).replayed == 2
    assert [(await _load(gw, {}))[0] for _ in range(2)] == [200, 200]
    assert _plans(gw).replayed == 4


async def test_answers_that_do_not_derive_from_the_registry_are_never_replayed(
    make_gateway: MakeGateway,
) -> None:
    """/metrics changes with every request, and is not a registry read: each scrape is decided and
    answered afresh (it would otherwise repeat its first numbers)."""
    gw = await _gateway(make_gateway)
    scraper = await _token(gw, "prometheus")
    first = await gw.client.get("/metrics", headers=scraper)
    assert first.status == 200, await first.text()
    await _load(gw, await _token(gw, "ana"))
    second = await gw.client.get("/metrics", headers=scraper)
    assert second.status == 200
    assert await second.read() != await first.read()
    assert _plans(gw).replayed == 0


def test_only_reads_of_the_registry_are_marked_replayable() -> None:
    from cedarberg.gateway.authz.operations import OPERATIONS

    replayable = {name for name, spec in OPERATIONS.items() if spec.replayable}
    assert replayable == {
        "getConfig",
        "listNamespaces",
        "loadNamespaceMetadata",
        "namespaceExists",
        "listTables",
        "loadTable",
        "tableExists",
        "listViews",
        "loadView",
        "viewExists",
    }
    assert all(OPERATIONS[name].group is ActionGroup.READ for name in replayable)
