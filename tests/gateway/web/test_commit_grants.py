"""A table commit is decided on the grants the database holds in the request: the catalog reads
them with the pointer it plans on, in one statement (`catalog.store.commit_reads`), for the
table's namespace and every namespace above it, and the effect gate decides on them instead of
reading them again; never on the read cache."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cedarberg.catalog.store import commit_reads
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.tx import StoreTx
from cedarberg.gateway.authz.operations import EFFECT_CHECKS
from cedarberg.gateway.web import resources
from cedarberg.gateway.web.keys import SERVICES
from tests.gateway.web.conftest import InProcessGateway, MakeGateway
from tests.support.gateway import bundled_policies

TABLE = "/v1/namespaces/lake%1Fraw/tables/t"
LAKE = {"cedarberg.writers": "etl", "cedarberg.readers": "etl"}


def set_property(key: str) -> dict[str, Any]:
    return {"requirements": [], "updates": [{"action": "set-properties", "updates": {key: "1"}}]}


async def _lake(make_gateway: MakeGateway, tmp_path: Path) -> InProcessGateway:
    """A gateway on the bundled policies where etl writes in `lake` and below, and `lake.raw.t`;
    its read cache keeps what another process changes for a minute (not 1 s: the tests below
    must not depend on how fast the machine runs them)."""
    policies = bundled_policies(tmp_path / "policies", {})
    config = {"authz": {"policy_dir": str(policies)}, "cache": {"registry_ttl_seconds": 60}}
    gw = await make_gateway(anonymous=False, config=config)
    await gw.create_namespace("lake", LAKE, headers=gw.as_("root"))
    raw = await gw.client.post("/v1/namespaces", json={"namespace": ["lake", "raw"]}, headers=gw.as_("root"))
    assert raw.status == 200
    await gw.create_table("lake%1Fraw", "t", headers=gw.as_("root"))
    return gw


async def _properties(gw: InProcessGateway) -> dict[str, str]:
    loaded = await gw.client.get(TABLE, headers=gw.as_("root"))
    assert loaded.status == 200
    return dict((await loaded.json())["metadata"]["properties"])


def _counting(calls: list[str], name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return await original(*args, **kwargs)

    return counted


async def test_a_grant_removed_after_the_request_was_admitted_refuses_the_commit(
    make_gateway: MakeGateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker removes etl's write grant from the parent namespace after the pipeline
    admitted the commit and before the catalog plans it: the effect is decided on the grants the
    plan read with its pointer, so the commit is refused and nothing changes."""
    gw = await _lake(make_gateway, tmp_path)
    assert (await gw.client.post(TABLE, json=set_property("a"), headers=gw.as_("etl-bot"))).status == 200
    warehouse = gw.app[SERVICES].ctx.default_warehouse
    original = commit_reads.object_in_chain

    async def revoked_first(tx: StoreTx, *args: Any) -> Any:
        other = await open_store(gw.settings.effective_store_url())
        try:
            async with other.write() as other_tx:
                await namespace_rows.set_namespace_properties(
                    other_tx, warehouse, "lake", {"cedarberg.readers": "etl"}
                )
        finally:
            await other.close()
        monkeypatch.setattr(commit_reads, "object_in_chain", original)
        return await original(tx, *args)

    monkeypatch.setattr(commit_reads, "object_in_chain", revoked_first)
    refused = await gw.client.post(TABLE, json=set_property("b"), headers=gw.as_("etl-bot"))

    assert refused.status == 403
    assert await _properties(gw) == {"a": "1"}


async def test_a_commit_reads_its_grants_once_with_its_pointer(
    make_gateway: MakeGateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = await _lake(make_gateway, tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(
        commit_reads, "object_in_chain", _counting(calls, "pointer and grants", commit_reads.object_in_chain)
    )
    monkeypatch.setattr(
        namespace_rows,
        "namespace_properties",
        _counting(calls, "grants", namespace_rows.namespace_properties),
    )

    for key in ("a", "b"):
        landed = await gw.client.post(TABLE, json=set_property(key), headers=gw.as_("etl-bot"))
        assert landed.status == 200, await landed.text()
    # The pipeline decides the operation on the grants as a read would (the read cache, which the
    # first commit fills); the gate decides the effect on those the plan read with its pointer:
    # from then on, one read of the database per commit before its write.
    assert calls == ["grants", "pointer and grants", "pointer and grants"]
    assert await _properties(gw) == {"a": "1", "b": "1"}


async def _revoke_elsewhere(gw: InProcessGateway, grants: dict[str, str]) -> None:
    """Another gateway process sets `lake`'s grants: this one's read cache still holds the old."""
    other = await open_store(gw.settings.effective_store_url())
    try:
        async with other.write() as other_tx:
            warehouse = gw.app[SERVICES].ctx.default_warehouse
            await namespace_rows.set_namespace_properties(other_tx, warehouse, "lake", grants)
    finally:
        await other.close()


def _transaction(key: str) -> dict[str, Any]:
    change = set_property(key)
    return {"table-changes": [{"identifier": {"namespace": ["lake", "raw"], "name": "t"}, **change}]}


@pytest.mark.parametrize(
    ("operation", "path", "body"),
    [("updateTable", TABLE, set_property), ("commitTransaction", "/v1/transactions/commit", _transaction)],
    ids=["updateTable", "commitTransaction"],
)
async def test_a_grant_revoked_elsewhere_while_cached_refuses_the_commit_at_the_gate(
    make_gateway: MakeGateway,
    tmp_path: Path,
    operation: str,
    path: str,
    body: Callable[[str], dict[str, Any]],
) -> None:
    """The attack on the cached request-level decision: another process revokes etl's write grant
    while this gateway's read cache still holds it. The pipeline admits the commit on the cached
    grants (as it would a read), and the effect gate, deciding on the grants read from the
    database with the pointer, refuses it: nothing is written."""
    gw = await _lake(make_gateway, tmp_path)
    first = await gw.client.post(path, json=body("a"), headers=gw.as_("etl-bot"))
    assert first.status in (200, 204), await first.text()
    await _revoke_elsewhere(gw, {"cedarberg.readers": "etl"})

    refused = await gw.client.post(path, json=body("b"), headers=gw.as_("etl-bot"))

    assert refused.status == 403, await refused.text()
    message = (await refused.json())["error"]["message"]
    assert message.startswith(f"Not allowed: {operation}: "), message
    assert message.endswith("(set-properties)"), message  # the gate's refusal: it names the effect
    assert await _properties(gw) == {"a": "1"}


def test_every_operation_decided_on_cached_grants_is_decided_again_by_the_gate() -> None:
    """The rule that makes the cached request-level decision safe, checked for every operation
    that uses it: the effect gate decides the operation's own action again, on the database's
    grants, for an existing object and for one the change creates."""
    for operation in resources._REDECIDED_BY_THE_GATE:
        checks = EFFECT_CHECKS[operation]
        assert operation in checks.existing, operation
        assert operation in checks.arriving, operation
