"""Namespaces created under new names share one Cedar decision (`gateway/authz/sight.py`),
through the real application: each is still audited under its own name, and a name a policy
singles out is decided on its own (the attack: slipping it in among names already decided)."""

from __future__ import annotations

from pathlib import Path

from cedarberg.gateway.web.keys import SECURITY
from tests.gateway.web.conftest import MakeGateway
from tests.support.gateway import bundled_policies

NO_LEGACY = (
    '@id("no-legacy")\n'
    'forbid (principal, action == Cedarberg::Action::"createNamespace", '
    'resource == Cedarberg::Namespace::"default/legacy");\n'
)


async def test_new_namespaces_share_a_decision_and_a_named_one_is_refused(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    policies = bundled_policies(tmp_path / "policies", {"legacy.cedar": NO_LEGACY})
    gw = await make_gateway(anonymous=False, config={"authz": {"policy_dir": str(policies)}})
    admin = gw.as_("root")
    engine = gw.app[SECURITY].policies
    for i in range(6):
        await gw.create_namespace(f"n{i}", headers=admin)
    hits = engine.decision_hits
    refused = await gw.client.post("/v1/namespaces", json={"namespace": ["legacy"]}, headers=admin)
    assert refused.status == 403
    assert (await refused.json())["error"]["type"] == "ForbiddenException"
    assert (await gw.client.get("/v1/namespaces/legacy", headers=admin)).status == 404
    await gw.create_namespace("n6", headers=admin)
    assert engine.decision_hits > hits  # n6 was answered from n0's decision
    decisions = [
        (r["resource"], r["decision"], r["policy_ids"])
        for r in await gw.audit()
        if r.get("event") == "decision" and r.get("action") == "createNamespace"
    ]
    named = [(f'Cedarberg::Namespace::"default/n{i}"', "allow") for i in range(6)]
    assert [(resource, decision) for resource, decision, _ in decisions] == [
        *named,
        ('Cedarberg::Namespace::"default/legacy"', "deny"),
        ('Cedarberg::Namespace::"default/n6"', "allow"),
    ]
    assert decisions[6][2] == ["no-legacy"]
