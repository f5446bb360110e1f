"""Where a column/row restriction cannot bind (`gateway.authz.binding`, `binding_static`), decided
with a real policy engine over the bundled schema and policies plus a restricted permit.

The scenario of issue 29: a security engineer restricts `analysts` on `default/finance` with
`@columns` (no `ssn`); a namespace grant `cedarberg.readers = analysts` lifts the restriction, and a
`file://` warehouse lets any engine on the host read the files whatever the gateway plans. Each
finding names the restricted permit and what defeats it; a restricted permit on an S3 warehouse,
granted through nothing else and trusted to no client, has none (the control).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import entities, review
from cedarberg.gateway.authz.binding import Finding, FindingKind, Judge, resource_findings
from cedarberg.gateway.authz.binding_static import log_static_findings, static_findings
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import READERS_PROPERTY, Resource
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.policies import generated_engine

RESTRICTED = "analysts-finance-no-ssn"
GRANT = "readers-read-granted"
LOCAL = {"default": "file:///srv/lake/warehouse"}
S3 = {"default": "s3://lake/warehouse"}
FINANCE_PERMIT = f"""
@id("{RESTRICTED}")
@columns("id, name, amount")
permit (
  principal in Cedarberg::Group::"analysts",
  action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],
  resource in Cedarberg::Namespace::"default/finance"
);
"""
TRUST_PERMIT = """
@id("analysts-engine-trusted")
permit (
  principal in Cedarberg::Group::"analysts",
  action == Cedarberg::Action::"readRestrictedData",
  resource in Cedarberg::Namespace::"default/finance"
);
"""
ANA = Principal("key:ana", PrincipalKind.USER, frozenset({"analysts"}), AuthMethod.API_KEY)


def _bundled() -> str:
    return "\n".join(path.read_text() for path in sorted(BUNDLED_POLICY_DIR.glob("*.cedar")))


def _engine(tmp_path: Path, *extra: str, bundled: bool = True) -> PolicyEngine:
    return generated_engine(tmp_path, "\n".join([_bundled() if bundled else "", FINANCE_PERMIT, *extra]))


def _accounts(readers: str | None = None) -> Resource:
    chain = [{READERS_PROPERTY: readers}] if readers is not None else []
    return entities.child_table(entities.namespace_resource("default", ("finance",), chain), "accounts")


def _explain(engine: PolicyEngine, table: Resource, locations: dict[str, str] | None) -> list[Finding]:
    context = review.ReviewContext().request()
    decision = engine.decide(ANA, "planTableScan", table, context)
    assert decision.allowed
    return Judge(engine, context, locations).decision(decision, ANA, table)


def test_a_namespace_grant_lifts_the_restriction_and_both_policies_are_named(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    (finding,) = _explain(engine, _accounts(readers="analysts"), S3)
    assert finding.kind is FindingKind.LIFTED
    assert (finding.policy_id, finding.lifted_by, finding.principals) == (RESTRICTED, (GRANT,), ("key:ana",))
    assert finding.resource == 'Cedarberg::Table::"default/finance/accounts"'
    assert RESTRICTED in finding.message
    assert GRANT in finding.message
    assert finding.to_json()["binds_instead"] == finding.binds_instead
    # The finding says what the gateway does: the Allow carries no restriction at all.
    decision = engine.decide(
        ANA, "planTableScan", _accounts(readers="analysts"), review.ReviewContext().request()
    )
    assert not any(rule.restricted for rule in engine.scan_rules(decision))


def test_without_the_grant_a_local_warehouse_still_defeats_the_restriction(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    (finding,) = _explain(engine, _accounts(), LOCAL)
    assert finding.kind is FindingKind.LOCAL_WAREHOUSE
    assert (finding.policy_id, finding.warehouse, finding.location) == (
        RESTRICTED,
        "default",
        LOCAL["default"],
    )
    assert finding.lifted_by == ()
    assert "local directory" in finding.message
    assert "server-side scan planning" in finding.binds_instead
    # Warehouses unknown (an offline tool without settings): only lifting permits are checked.
    assert _explain(engine, _accounts(), None) == []


def test_a_restricted_permit_alone_on_s3_binds(tmp_path: Path) -> None:
    # Control: granted through nothing else, on an object store, no client trusted.
    engine = _engine(tmp_path)
    assert _explain(engine, _accounts(), S3) == []
    # The restriction is what the gateway enforces there.
    decision = engine.decide(ANA, "planTableScan", _accounts(), review.ReviewContext().request())
    (rule,) = engine.scan_rules(decision)
    assert rule.policy_id == RESTRICTED
    assert rule.columns == frozenset({"id", "name", "amount"})


def test_only_reads_are_judged(tmp_path: Path) -> None:
    # A restricted permit scoped to every action also allows, say, a commit; restrictions narrow
    # reads only, so an explain of the commit reports nothing about them.
    everything = """
    @id("analysts-everything-restricted")
    @columns("id")
    permit (
      principal in Cedarberg::Group::"analysts",
      action,
      resource in Cedarberg::Namespace::"default/finance"
    );
    """
    engine = _engine(tmp_path, everything)
    context = review.ReviewContext().request()
    table = _accounts(readers="analysts")
    judge = Judge(engine, context, S3)
    commit = engine.decide(ANA, "updateTable", table, context)
    assert commit.allowed
    assert "analysts-everything-restricted" in commit.policy_ids
    assert judge.decision(commit, ANA, table) == []
    read = engine.decide(ANA, "loadTable", table, context)
    lifted = {f.policy_id for f in judge.decision(read, ANA, table)}
    assert lifted == {RESTRICTED, "analysts-everything-restricted"}


def test_a_trusted_client_on_s3_enforces_the_restriction_itself(tmp_path: Path) -> None:
    engine = _engine(tmp_path, TRUST_PERMIT)
    (finding,) = _explain(engine, _accounts(), S3)
    assert finding.kind is FindingKind.TRUSTED_CLIENT
    assert finding.lifted_by == ("analysts-engine-trusted",)
    assert "readRestrictedData" in finding.message


def test_the_review_names_the_lifting_grant_for_the_group(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    table = _accounts(readers="analysts")
    actions = ["loadTable", "planTableScan"]
    audience = review.known_subjects([], review.residual_groups(engine, table, actions))
    reviewed = review.review_resource(engine, table, actions, audience)

    (finding,) = resource_findings(engine, reviewed, S3)
    assert (finding.kind, finding.policy_id, finding.lifted_by) == (FindingKind.LIFTED, RESTRICTED, (GRANT,))
    assert finding.principals == ("members of analysts",)
    without = _accounts()
    audience = review.known_subjects([], review.residual_groups(engine, without, actions))
    assert resource_findings(engine, review.review_resource(engine, without, actions, audience), S3) == []


def test_the_loader_knows_what_a_grant_would_lift_and_the_local_warehouse(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    by_kind = {f.kind: f for f in static_findings(engine, LOCAL)}
    assert set(by_kind) == {FindingKind.LIFTED_IF_GRANTED, FindingKind.LOCAL_WAREHOUSE}
    granted = by_kind[FindingKind.LIFTED_IF_GRANTED]
    assert granted.policy_id == RESTRICTED
    assert granted.lifted_by == (GRANT, "writers-read-granted")
    assert granted.principals == ("members of analysts",)
    assert granted.resource == 'Cedarberg::Namespace::"default/finance"'
    assert by_kind[FindingKind.LOCAL_WAREHOUSE].location == LOCAL["default"]


def test_the_loader_finds_an_unrestricted_permit_for_the_same_group(tmp_path: Path) -> None:
    overlap = """
    @id("analysts-read-finance")
    permit (
      principal in Cedarberg::Group::"analysts",
      action in Cedarberg::Action::"read",
      resource in Cedarberg::Namespace::"default/finance"
    );
    """
    engine = _engine(tmp_path, overlap, bundled=False)
    (finding,) = static_findings(engine, S3)
    assert (finding.kind, finding.policy_id, finding.lifted_by) == (
        FindingKind.LIFTED,
        RESTRICTED,
        ("analysts-read-finance",),
    )


def test_the_loader_finds_an_unrestricted_permit_to_the_files(tmp_path: Path) -> None:
    # Vended credentials or signed requests decided by an unrestricted permit hand out the whole
    # files, whatever planning would have restricted.
    files = """
    @id("analysts-fetch-credentials")
    permit (
      principal in Cedarberg::Group::"analysts",
      action == Cedarberg::Action::"loadCredentials",
      resource in Cedarberg::Namespace::"default/finance"
    );
    """
    engine = _engine(tmp_path, files, bundled=False)
    (finding,) = static_findings(engine, S3)
    assert (finding.kind, finding.policy_id) == (FindingKind.LIFTED, RESTRICTED)
    assert finding.lifted_by == ("analysts-fetch-credentials",)
    # Explain of the restricted plan says so too: the files are the way around it.
    context = review.ReviewContext().request()
    plan = engine.decide(ANA, "planTableScan", _accounts(), context)
    assert plan.policy_ids == (RESTRICTED,)
    (explained,) = Judge(engine, context, S3).decision(plan, ANA, _accounts())
    assert explained.lifted_by == ("analysts-fetch-credentials",)


def test_a_restricted_permit_alone_gives_the_loader_nothing_to_report(tmp_path: Path) -> None:
    # Control: no grant policy could lift it, and the warehouse is an object store.
    engine = _engine(tmp_path, bundled=False)
    assert static_findings(engine, S3) == []


def test_each_load_logs_its_findings_with_structured_fields(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "schema.cedarschema").write_text((BUNDLED_POLICY_DIR / "schema.cedarschema").read_text())
    (tmp_path / "generated.cedar").write_text(_bundled() + FINANCE_PERMIT)
    engine = PolicyEngine(tmp_path)
    engine.on_loaded(lambda loaded: log_static_findings(loaded, LOCAL))
    with caplog.at_level(logging.WARNING, logger="cedarberg.gateway.authz"):
        engine.load()
    records = [r for r in caplog.records if r.getMessage().startswith("restriction not binding")]
    assert {r.__dict__["finding"] for r in records} == {"lifted-if-granted", "local-warehouse"}
    granted = next(r for r in records if r.__dict__["finding"] == "lifted-if-granted")
    assert RESTRICTED in granted.getMessage()
    assert GRANT in granted.getMessage()
    assert granted.__dict__["policy_id"] == RESTRICTED
    assert granted.__dict__["lifted_by"] == [GRANT, "writers-read-granted"]
    assert granted.__dict__["policy_version"] == engine.version
    # A reload of the same content changes nothing and reports nothing again.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cedarberg.gateway.authz"):
        engine.load()
    assert not [r for r in caplog.records if r.getMessage().startswith("restriction not binding")]
