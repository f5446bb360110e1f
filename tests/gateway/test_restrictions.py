"""Column and row restrictions on Cedar permits (`gateway/authz/restrictions.py`): checked when a
policy set loads, and resolved from the permits that allowed a real cedarpy decision."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from pyiceberg.expressions import EqualTo

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.cli import ExplainQuery, PrincipalSpec, ResourceSpec, explain
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import namespace_resource, table_resource
from cedarberg.gateway.authz.errors import PolicyLoadError
from cedarberg.gateway.authz.restrictions import UNRESTRICTED, ScanRule, rules_of
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR

ORDERS = 'Cedarberg::Table::"default/sales/orders"'
PLAN_ACTIONS = (
    '[Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan", '
    'Cedarberg::Action::"fetchPlanningResult", Cedarberg::Action::"fetchScanTasks"]'
)
EU_ANALYSTS = f"""
@id("analysts-eu-orders")
@columns("order_id, region, amount, customer")
@row_filter("region = 'eu'")
permit (principal in Cedarberg::Group::"analysts", action in {PLAN_ACTIONS}, resource == {ORDERS});
"""
US_ANALYSTS = f"""
@id("analysts-us-orders")
@columns("order_id, region")
@row_filter("region = 'us' and amount < 1000")
permit (principal in Cedarberg::Group::"us-analysts", action in {PLAN_ACTIONS}, resource == {ORDERS});
"""


def _principal(*groups: str) -> Principal:
    return Principal("pat", PrincipalKind.USER, frozenset(groups), AuthMethod.API_KEY, {})


def _policies(tmp_path: Path, text: str) -> Path:
    target = tmp_path / "policies"
    shutil.copytree(BUNDLED_POLICY_DIR, target)
    (target / "restrictions.cedar").write_text(text)
    return target


def _engine(tmp_path: Path, text: str) -> PolicyEngine:
    engine = PolicyEngine(_policies(tmp_path, text))
    engine.load()
    return engine


def _refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(PolicyLoadError) as err:
        _engine(tmp_path, text)
    return str(err.value)


def _orders(grants: dict[str, str] | None = None) -> object:
    return table_resource("default", ["sales"], "orders", [grants or {}])


# -- checked at load -----------------------------------------------------------------------------


def test_a_valid_restriction_is_kept_with_its_parsed_filter(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS)
    assert engine.active is not None
    rule = engine.active.restrictions["analysts-eu-orders"]
    assert rule.columns == frozenset({"order_id", "region", "amount", "customer"})
    assert rule.row_filter == "region = 'eu'"
    assert isinstance(rule.expression, EqualTo)
    assert rule.restricted
    # The bundled policies carry none.
    assert set(engine.active.restrictions) == {"analysts-eu-orders"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            f'@id("f") @columns("a") forbid (principal, action, resource == {ORDERS});',
            "a forbid policy cannot carry it",
        ),
        (
            f'@id("l") @columns("a") permit (principal, action == Cedarberg::Action::"loadTable", '
            f"resource == {ORDERS});",
            "cannot allow planTableScan",
        ),
        (
            f'@id("w") @row_filter("a = 1") permit (principal, action in Cedarberg::Action::"write", '
            f"resource == {ORDERS});",
            "cannot allow planTableScan",
        ),
        (
            f'@id("e") @columns(" , ") permit (principal, action, resource == {ORDERS});',
            "must name at least one column",
        ),
        (
            f'@id("h") @columns("a,,b") permit (principal, action, resource == {ORDERS});',
            "empty column name",
        ),
        (
            f'@id("p") @row_filter("region = ") permit (principal, action, resource == {ORDERS});',
            "not a valid Iceberg row filter",
        ),
        (
            f'@id("q") @row_filter("") permit (principal, action, resource == {ORDERS});',
            "is empty",
        ),
        (
            f'@id("m1") @mask("ssn: blur") permit (principal, action, resource == {ORDERS});',
            "action 'blur' for ssn is not one of: mask-alphanum, mask-to-fixed-value",
        ),
        (
            f'@id("m2") @mask("ssn") permit (principal, action, resource == {ORDERS});',
            'entries are "column: action"',
        ),
        (
            f'@id("m3") @mask("ssn: show-last-4, ssn: sha-256-global") permit (principal, action, '
            f"resource == {ORDERS});",
            "names ssn twice",
        ),
        (
            f'@id("m4") @columns("id") @mask("ssn: show-last-4") permit (principal, action, '
            f"resource == {ORDERS});",
            "masks ssn, which @columns does not let through",
        ),
        (
            f'@id("m5") @mask("address: mask-to-fixed-value, address.zip: mask-alphanum") '
            f"permit (principal, action, resource == {ORDERS});",
            "masks address.zip inside another masked column",
        ),
        (
            f'@id("m6") @mask("ssn: show-last-4") forbid (principal, action, resource == {ORDERS});',
            "a forbid policy cannot carry it",
        ),
    ],
)
def test_an_unusable_restriction_refuses_the_whole_set(tmp_path: Path, policy: str, expected: str) -> None:
    message = _refusal(tmp_path, "\n" + policy)
    assert expected in message
    assert "restrictions.cedar:2" in message  # file:line of the policy


def test_masks_are_kept_with_the_columns_they_narrow(tmp_path: Path) -> None:
    engine = _engine(
        tmp_path,
        f"""
@id("masked")
@columns("order_id, customer, address")
@mask("customer: show-first-4, address.zip: mask-alphanum")
permit (principal in Cedarberg::Group::"analysts", action in {PLAN_ACTIONS}, resource == {ORDERS});
""",
    )
    (rule,) = _rules(engine, _principal("analysts"), _orders())
    assert rule.masks == (("address.zip", "mask-alphanum"), ("customer", "show-first-4"))
    assert rule.restricted
    # A permit with only a mask is a restriction too: its reader gets no files, only the mask.
    only_mask = _engine(
        tmp_path / "only",
        f'@id("m") @mask("customer: sha-256-global") permit (principal in Cedarberg::Group::"analysts", '
        f"action in {PLAN_ACTIONS}, resource == {ORDERS});",
    )
    (masked,) = _rules(only_mask, _principal("analysts"), _orders())
    assert masked.restricted
    assert masked.columns is None


def test_a_refused_restriction_keeps_the_last_good_set(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS)
    good = engine.version
    (engine.directory / "restrictions.cedar").write_text(EU_ANALYSTS.replace("region = 'eu'", "region ="))
    engine.reload()
    assert engine.version == good
    assert engine.last_error is not None
    assert "analysts-eu-orders" in engine.active.restrictions  # type: ignore[union-attr]


def test_restrictions_through_the_read_group_or_every_action_are_accepted(tmp_path: Path) -> None:
    engine = _engine(
        tmp_path,
        f'@id("r") @columns("a")\n'
        f'permit (principal, action in Cedarberg::Action::"read", resource == {ORDERS});\n'
        f'@id("all") @row_filter("a > 1")\n'
        f'permit (principal in Cedarberg::Group::"x", action, resource == {ORDERS});',
    )
    assert engine.active is not None
    assert set(engine.active.restrictions) == {"r", "all"}


# -- resolved from a decision ----------------------------------------------------------------------


def _rules(engine: PolicyEngine, who: Principal, resource: object) -> tuple[ScanRule, ...]:
    decision = engine.decide(who, "planTableScan", resource, RequestContext.of(who, "127.0.0.1"))  # type: ignore[arg-type]
    return engine.scan_rules(decision)


def test_a_principal_allowed_only_by_a_restricted_permit_gets_its_rule(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS + US_ANALYSTS)
    rules = _rules(engine, _principal("analysts"), _orders())
    assert [r.policy_id for r in rules] == ["analysts-eu-orders"]


def test_two_restricted_permits_give_two_ways_to_scan(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS + US_ANALYSTS)
    rules = _rules(engine, _principal("analysts", "us-analysts"), _orders())
    assert sorted(r.policy_id for r in rules) == ["analysts-eu-orders", "analysts-us-orders"]


def test_an_unrestricted_permit_lifts_the_restriction(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS)
    # The namespace grant `cedarberg.readers = analysts` satisfies the bundled readers permit too.
    rules = _rules(engine, _principal("analysts"), _orders({"cedarberg.readers": "analysts"}))
    assert rules == (UNRESTRICTED,)
    assert _rules(engine, _principal("admins", "analysts"), _orders()) == (UNRESTRICTED,)


def test_a_denial_or_a_changed_policy_set_gives_no_way_to_scan(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS)
    assert _rules(engine, _principal("interns"), _orders()) == ()
    who = _principal("analysts")
    decision = engine.decide(who, "planTableScan", _orders(), RequestContext.of(who, "127.0.0.1"))  # type: ignore[arg-type]
    (engine.directory / "restrictions.cedar").write_text(EU_ANALYSTS.replace("'eu'", "'fr'"))
    engine.reload()
    assert engine.version != decision.version
    assert engine.scan_rules(decision) == ()


def test_rules_of_fails_closed_without_determining_policies() -> None:
    rule = ScanRule("p", frozenset({"a"}), None, None)
    assert rules_of((), {"p": rule}) == ()
    assert rules_of(("p",), {"p": rule}) == (rule,)
    assert rules_of(("p", "grant"), {"p": rule}) == (UNRESTRICTED,)


def test_namespace_resources_are_unaffected(tmp_path: Path) -> None:
    engine = _engine(tmp_path, EU_ANALYSTS)
    ns = namespace_resource("default", ["sales"], [{"cedarberg.readers": "analysts"}])
    who = _principal("analysts")
    assert engine.decide(who, "listTables", ns, RequestContext.of(who, "127.0.0.1")).allowed


def test_explain_shows_the_restrictions_of_an_allow(tmp_path: Path) -> None:
    directory = _policies(tmp_path, EU_ANALYSTS)
    out = io.StringIO()
    query = ExplainQuery(
        PrincipalSpec("ana", ["analysts"]), "planTableScan", ResourceSpec("default/sales/orders")
    )
    assert explain(directory, query, out=out) == 0
    text = out.getvalue()
    assert (
        "restricted by analysts-eu-orders: columns amount, customer, order_id, region; rows region = 'eu'; "
        "masks none" in text
    )
    out = io.StringIO()
    granted = ["sales:cedarberg.readers=analysts"]
    granted_query = ExplainQuery(
        PrincipalSpec("ana", ["analysts"]), "planTableScan", ResourceSpec("default/sales/orders", granted)
    )
    code = explain(directory, granted_query, out=out)
    assert code == 0
    assert "restricted by" not in out.getvalue()
