"""A warehouse is decided, audited and answered as the one object the handler acts on, whatever
spelling names it (issue 27 §4): `getConfig`'s `warehouse` by name or by location in any accepted
spelling, a route's `{prefix}`. An unknown warehouse is a 404, answered as a hidden one is, with
nothing decided on a warehouse that does not exist.

The attack: an analyst the policies forbid `Warehouse::"sales"` asks for its configuration by its
location instead of its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.gateway.web.conftest import InProcessGateway, MakeGateway
from tests.support.gateway import bundled_policies

SALES = 'Cedarberg::Warehouse::"sales"'
NO_SALES_FOR_ANALYSTS = (
    '@id("no-sales-for-analysts")\n'
    'forbid (principal, action == Cedarberg::Action::"getConfig", '
    'resource == Cedarberg::Warehouse::"sales")\n'
    'when { principal.groups.contains("analysts") };\n'
)


def _spellings(directory: Path) -> list[str]:
    """Every way the catalog accepts to name the warehouse's root."""
    text = str(directory)
    return [f"file://{text}", f"file:{text}", f"file://{text}/", text, f"file://localhost{text}"]


async def _gateway(make_gateway: MakeGateway, tmp_path: Path) -> tuple[InProcessGateway, Path]:
    sales = tmp_path / "wh-sales"
    policies = bundled_policies(tmp_path / "policies", {"sales.cedar": NO_SALES_FOR_ANALYSTS})
    config = {
        "authz": {"policy_dir": str(policies)},
        "warehouses": {"sales": {"location": sales.as_uri()}},
    }
    return await make_gateway(anonymous=False, config=config), sales


async def _config(gw: InProcessGateway, principal: str, warehouse: str) -> tuple[int, dict[str, Any]]:
    answer = await gw.client.get("/v1/config", params={"warehouse": warehouse}, headers=gw.as_(principal))
    document: dict[str, Any] = await answer.json()
    return answer.status, document


def _decisions(records: list[dict[str, Any]], action: str) -> list[tuple[str, str, list[str]]]:
    return [
        (r["resource"], r["decision"], r.get("policy_ids", []))
        for r in records
        if r.get("event") == "decision" and r.get("action") == action
    ]


async def test_a_forbidden_warehouse_asked_by_its_location_is_decided_and_audited_as_itself(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    gw, sales = await _gateway(make_gateway, tmp_path)
    by_name = await _config(gw, "ana", "sales")
    unknown = await _config(gw, "ana", "nope")
    assert by_name[0] == 404
    assert by_name[1]["error"]["type"] == "NoSuchWarehouseException"
    assert unknown == by_name, "a forbidden warehouse answers exactly as one that does not exist"
    for spelling in _spellings(sales):
        assert await _config(gw, "ana", spelling) == by_name, spelling
    # Every refusal was decided on the warehouse itself, and the forbid is what refused it.
    decisions = _decisions(await gw.audit(), "getConfig")
    assert decisions == [(SALES, "deny", ["no-sales-for-analysts"])] * (1 + len(_spellings(sales)))


async def test_an_unknown_warehouse_is_a_404_with_nothing_decided(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    gw, sales = await _gateway(make_gateway, tmp_path)
    unknowns = [
        "nope",
        "SALES",
        (tmp_path / "elsewhere").as_uri(),
        f"{sales.as_uri()}/below",
        "s3://sales",
        "%",
    ]
    for value in unknowns:
        status, document = await _config(gw, "etl-bot", value)
        assert status == 404, value
        assert document["error"] == {
            "message": "Warehouse does not exist",
            "type": "NoSuchWarehouseException",
            "code": 404,
        }
    listed = await gw.client.get("/v1/nope/namespaces", headers=gw.as_("etl-bot"))
    assert listed.status == 404
    assert (await listed.json())["error"]["type"] == "NoSuchWarehouseException"
    records = await gw.audit()
    assert [r for r in records if r.get("event") == "decision"] == []


async def test_control_a_permitted_caller_gets_the_configuration_by_name_and_by_location(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    gw, sales = await _gateway(make_gateway, tmp_path)
    for value in ["sales", *_spellings(sales)]:
        status, document = await _config(gw, "etl-bot", value)
        assert status == 200, (value, document)
        assert document["overrides"] == {"prefix": "sales"}
    status, document = await _config(gw, "ana", "default")
    assert (status, document["overrides"]) == (200, {"prefix": "default"})
    decisions = _decisions(await gw.audit(), "getConfig")
    assert decisions[:-1] == [(SALES, "allow", decisions[0][2])] * (1 + len(_spellings(sales)))
    assert decisions[-1][:2] == ('Cedarberg::Warehouse::"default"', "allow")
