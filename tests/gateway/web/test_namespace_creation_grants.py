"""A namespace creation is decided on what it writes: a new namespace under its parents' grants,
read fresh from the registry (never the read cache), and never on the properties of a namespace
that already has the name."""

from __future__ import annotations

from pathlib import Path

from tests.gateway.web.conftest import InProcessGateway, MakeGateway
from tests.support.gateway import bundled_policies

WRITERS_CREATE = (
    '@id("writers-create-namespaces")\n'
    'permit (principal, action == Cedarberg::Action::"createNamespace", resource is Cedarberg::Namespace)\n'
    "when { principal.groups.containsAny(resource.writers) };\n"
)


async def _gateway(make_gateway: MakeGateway, tmp_path: Path) -> InProcessGateway:
    policies = bundled_policies(tmp_path / "policies", {"create.cedar": WRITERS_CREATE})
    return await make_gateway(anonymous=False, config={"authz": {"policy_dir": str(policies)}})


async def _create(gw: InProcessGateway, principal: str, *levels: str) -> int:
    answer = await gw.client.post(
        "/v1/namespaces", json={"namespace": list(levels)}, headers=gw.as_(principal)
    )
    return answer.status


async def test_a_child_is_decided_on_its_parents_grants_as_they_are_now(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    gw = await _gateway(make_gateway, tmp_path)
    lake = {"cedarberg.writers": "etl", "cedarberg.readers": "etl"}
    await gw.create_namespace("lake", lake, headers=gw.as_("root"))
    assert await _create(gw, "etl-bot", "lake", "raw") == 200
    assert await _create(gw, "etl-bot", "elsewhere") == 403
    # The write grant removed (etl still reads "lake"): the very next creation is refused (fresh
    # grants, not the read cache).
    removed = await gw.client.post(
        "/v1/namespaces/lake/properties", json={"removals": ["cedarberg.writers"]}, headers=gw.as_("root")
    )
    assert removed.status == 200
    assert await _create(gw, "etl-bot", "lake", "clean") == 403
    assert (await gw.client.get("/v1/namespaces/lake%1Fclean", headers=gw.as_("root"))).status == 404


async def test_an_existing_namespaces_own_grants_do_not_decide_its_creation(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    gw = await _gateway(make_gateway, tmp_path)
    await gw.create_namespace("solo", {"cedarberg.writers": "etl", "owner": "ops"}, headers=gw.as_("root"))
    # etl may write inside "solo" but may not create top-level namespaces: creating "solo" again
    # is refused as any top-level creation is, and changes nothing.
    assert await _create(gw, "etl-bot", "solo") == 403
    assert await _create(gw, "root", "solo") == 409
    loaded = await gw.client.get("/v1/namespaces/solo", headers=gw.as_("root"))
    assert (await loaded.json())["properties"] == {"cedarberg.writers": "etl", "owner": "ops"}
