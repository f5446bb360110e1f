"""Cedar authorization with the real cedarpy: the default policies, the operation table, loading,
refusing and hot-reloading policy sets, fixtures and the CLI functions."""

from __future__ import annotations

import asyncio
import io
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from cedarberg.catalog.effects import Effect
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.authorizer import (
    Verdict,
    authorize,
    decide_checks,
    effect_checks,
    filter_visible,
    is_visible,
    plan_checks,
)
from cedarberg.gateway.authz.cli import (
    ContextSpec,
    ExplainQuery,
    PrincipalSpec,
    ResourceSpec,
    explain,
    run_fixture_tests,
    validate,
)
from cedarberg.gateway.authz.context import MAX_CONTEXT_ITEMS, ChangeSummary, RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine, ReloadOutcome
from cedarberg.gateway.authz.entities import (
    EntityType,
    Resource,
    api_key_resource,
    catalog_resource,
    child_namespace,
    child_table,
    child_view,
    namespace_resource,
    parse_path,
    table_resource,
    warehouse_resource,
)
from cedarberg.gateway.authz.errors import PolicyLoadError, ResourceError, UnknownOperationError
from cedarberg.gateway.authz.operations import OPERATIONS, ActionGroup, Scope, check_route_table
from cedarberg.gateway.authz.reload import PolicyWatcher
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.policies import validate_summary

SALES = {"cedarberg.writers": "etl", "cedarberg.readers": "analysts"}


def principal(id_: str, *groups: str, method: AuthMethod = AuthMethod.API_KEY, **attrs: str) -> Principal:
    return Principal(id_, PrincipalKind.USER, frozenset(groups), method, attrs)


ADMIN = principal("ada", "admins")
WRITER = principal("erin", "etl")
READER = principal("ana", "analysts")
MEMBER = principal("ivan", "interns")
STRANGER = principal("sam")


def ctx(who: Principal, changes: ChangeSummary | None = None) -> RequestContext:
    return RequestContext.of(who, "127.0.0.1", changes)


@pytest.fixture(scope="module")
def engine() -> PolicyEngine:
    engine = PolicyEngine(BUNDLED_POLICY_DIR)
    engine.load()
    return engine


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A private copy of the bundled policies that a test may edit."""
    target = tmp_path / "policies"
    shutil.copytree(BUNDLED_POLICY_DIR, target)
    return target


# -- resources for every scope -------------------------------------------------------------------

SALES_NS = namespace_resource("default", ["sales"], [SALES])
SALES_EU_NS = child_namespace(SALES_NS, "eu")
HR_NS = namespace_resource("default", ["hr"], [{}])


def call(
    eng: PolicyEngine,
    who: Principal,
    operation: str,
    namespace: Resource,
    changes: ChangeSummary | None = None,
) -> Verdict:
    """Authorize `operation` on a fitting resource inside `namespace` (or on the catalog/warehouse)."""
    spec = OPERATIONS[operation]
    context = ctx(who, changes)
    table = child_table(namespace, "orders")
    if operation == "createNamespace":
        return authorize(eng, who, operation, context, child_namespace(namespace, "new"))
    if operation == "commitTransaction":
        return authorize(eng, who, operation, context, tables=[table])
    if operation == "renameTable":
        return authorize(eng, who, operation, context, table, target=child_table(namespace, "orders2"))
    if operation == "renameView":
        view = child_view(namespace, "v")
        return authorize(eng, who, operation, context, view, target=child_view(namespace, "v2"))
    resource = {
        Scope.CATALOG: catalog_resource(),
        Scope.WAREHOUSE: warehouse_resource("default"),
        Scope.CONTAINER: namespace,
        Scope.NAMESPACE: namespace,
        Scope.TABLE: table,
        Scope.VIEW: child_view(namespace, "daily"),
        Scope.API_KEY: api_key_resource("k1", "someone-else"),
    }[spec.scope]
    return authorize(eng, who, operation, context, resource)


CATALOG_OPS = [op for op, spec in OPERATIONS.items() if spec.action is not None]
READ_OPS = [
    op for op, s in OPERATIONS.items() if s.group is ActionGroup.READ and s.scope is not Scope.WAREHOUSE
]
WRITE_OPS = [op for op, s in OPERATIONS.items() if s.group is ActionGroup.WRITE]
MANAGE_OPS = [op for op, s in OPERATIONS.items() if s.group is ActionGroup.MANAGE]
ADMIN_OPS = [op for op, s in OPERATIONS.items() if s.group is ActionGroup.ADMIN]


# -- the default policies ------------------------------------------------------------------------


def test_default_policy_set_loads_with_a_content_version(engine: PolicyEngine) -> None:
    assert len(engine.version) == 64
    assert engine.last_error is None
    assert engine.active is not None
    assert set(engine.active.locations) == {
        "admins-manage-everything",
        "members-discover-warehouses",
        "readers-read-granted",
        "writers-read-granted",
        "writers-write-granted",
        "protected-refs",
        "schema-locked",
        "monitoring-reads-metrics",
        "people-use-the-console",
        "audit-readers-read-audit-log",
    }
    assert engine.active.locations["admins-manage-everything"] == "admins.cedar:3"


@pytest.mark.parametrize("operation", CATALOG_OPS)
def test_admin_may_do_everything(engine: PolicyEngine, operation: str) -> None:
    for namespace in (SALES_NS, HR_NS):
        verdict = call(engine, ADMIN, operation, namespace, ChangeSummary(frozenset({"add-schema"})))
        assert verdict.allowed, (operation, verdict.denied)
        assert all("admins-manage-everything" in d.policy_ids for _, d in verdict.decisions)
        assert all(d.version == engine.version for _, d in verdict.decisions)


@pytest.mark.parametrize("operation", READ_OPS + WRITE_OPS)
def test_writer_reads_and_writes_where_granted_and_below(engine: PolicyEngine, operation: str) -> None:
    assert call(engine, WRITER, operation, SALES_NS).allowed
    assert call(engine, WRITER, operation, SALES_EU_NS).allowed  # the grant covers child namespaces


@pytest.mark.parametrize("operation", READ_OPS + WRITE_OPS + MANAGE_OPS)
def test_writer_gets_nothing_elsewhere_and_cannot_see_it(engine: PolicyEngine, operation: str) -> None:
    verdict = call(engine, WRITER, operation, HR_NS)
    assert not verdict.allowed
    assert verdict.hidden  # hr is invisible to etl: 404, as if absent
    assert verdict.hidden_kind in (EntityType.NAMESPACE, EntityType.TABLE, EntityType.VIEW)


@pytest.mark.parametrize("operation", MANAGE_OPS + ADMIN_OPS)
def test_writer_cannot_manage_or_administer(engine: PolicyEngine, operation: str) -> None:
    verdict = call(engine, WRITER, operation, SALES_NS)
    assert not verdict.allowed
    if OPERATIONS[operation].scope is Scope.NAMESPACE:
        assert not verdict.hidden  # the namespace is visible: 403, not 404


@pytest.mark.parametrize("operation", READ_OPS)
def test_reader_reads_where_granted(engine: PolicyEngine, operation: str) -> None:
    verdict = call(engine, READER, operation, SALES_EU_NS)
    assert verdict.allowed
    assert verdict.decisions[0][1].policy_ids == ("readers-read-granted",)


@pytest.mark.parametrize("operation", WRITE_OPS + MANAGE_OPS + ADMIN_OPS)
def test_reader_cannot_write_and_is_told_so(engine: PolicyEngine, operation: str) -> None:
    verdict = call(engine, READER, operation, SALES_NS)
    assert not verdict.allowed
    assert not verdict.hidden or OPERATIONS[operation].scope is Scope.API_KEY  # visible: 403


@pytest.mark.parametrize("who", [STRANGER, MEMBER], ids=["no-groups", "ungranted-group"])
@pytest.mark.parametrize("operation", READ_OPS + WRITE_OPS + MANAGE_OPS + ADMIN_OPS)
def test_everyone_else_gets_nothing(engine: PolicyEngine, who: Principal, operation: str) -> None:
    verdict = call(engine, who, operation, SALES_NS)
    assert not verdict.allowed
    assert verdict.hidden or OPERATIONS[operation].scope is Scope.CATALOG


def test_warehouse_discovery_needs_a_group(engine: PolicyEngine) -> None:
    warehouse = warehouse_resource("default")
    assert authorize(engine, MEMBER, "getConfig", ctx(MEMBER), warehouse).allowed
    assert authorize(engine, MEMBER, "listNamespaces", ctx(MEMBER), warehouse).allowed
    verdict = authorize(engine, STRANGER, "getConfig", ctx(STRANGER), warehouse)
    assert not verdict.allowed
    assert verdict.hidden_kind is EntityType.WAREHOUSE


def test_listings_are_filtered_not_denied(engine: PolicyEngine) -> None:
    warehouse = warehouse_resource("default")
    children = [
        child_namespace(warehouse, "sales", SALES),
        child_namespace(warehouse, "hr", {"cedarberg.readers": "people"}),
        child_namespace(warehouse, "marketing", {"cedarberg.readers": "analysts,bi"}),
    ]
    visible = filter_visible(engine, READER, ctx(READER), children)
    assert [r.namespace for r in visible] == [("sales",), ("marketing",)]
    assert filter_visible(engine, ADMIN, ctx(ADMIN), children) == children
    assert filter_visible(engine, STRANGER, ctx(STRANGER), children) == []
    tables = [child_table(SALES_NS, f"t{i}") for i in range(5)] + [child_table(HR_NS, "pay")]
    assert [t.name for t in filter_visible(engine, WRITER, ctx(WRITER), tables)] == [
        f"t{i}" for i in range(5)
    ]
    assert filter_visible(engine, WRITER, ctx(WRITER), []) == []


def test_is_visible(engine: PolicyEngine) -> None:
    assert is_visible(engine, READER, child_table(SALES_NS, "x"), ctx(READER))
    assert not is_visible(engine, READER, child_table(HR_NS, "x"), ctx(READER))
    assert is_visible(engine, STRANGER, catalog_resource(), ctx(STRANGER))


def test_rename_needs_drop_on_source_and_create_on_target(engine: PolicyEngine) -> None:
    source = child_table(SALES_NS, "orders")
    inside = authorize(
        engine, WRITER, "renameTable", ctx(WRITER), source, target=child_table(SALES_EU_NS, "o")
    )
    assert inside.allowed
    assert [c.action for c, _ in inside.decisions] == ["renameTable", "dropTable", "createTable"]

    out = authorize(engine, WRITER, "renameTable", ctx(WRITER), source, target=child_table(HR_NS, "o"))
    assert not out.allowed
    assert out.denied is not None
    assert out.denied.action == "createTable"
    assert out.hidden_kind is EntityType.NAMESPACE  # the target namespace is invisible to etl

    into = authorize(engine, WRITER, "renameTable", ctx(WRITER), child_table(HR_NS, "pay"), target=source)
    assert not into.allowed
    assert into.hidden_kind is EntityType.TABLE

    with pytest.raises(ResourceError):
        authorize(engine, WRITER, "renameTable", ctx(WRITER), source)


def test_transaction_needs_update_on_every_table(engine: PolicyEngine) -> None:
    granted = [child_table(SALES_NS, "a"), child_table(SALES_EU_NS, "b")]
    ok = authorize(engine, WRITER, "commitTransaction", ctx(WRITER), tables=granted)
    assert ok.allowed
    assert [c.action for c, _ in ok.decisions] == ["commitTransaction", "updateTable"] * 2
    bad = authorize(
        engine, WRITER, "commitTransaction", ctx(WRITER), tables=[*granted, child_table(HR_NS, "c")]
    )
    assert not bad.allowed
    assert bad.hidden_kind is EntityType.TABLE
    with pytest.raises(ResourceError):
        authorize(engine, WRITER, "commitTransaction", ctx(WRITER))


def test_protected_refs_and_schema_lock_guards(engine: PolicyEngine) -> None:
    guarded = namespace_resource(
        "default",
        ["finance", "ledgers"],
        [
            {
                "cedarberg.writers": "etl",
                "cedarberg.protected-refs": "main",
                "cedarberg.schema-locked": "true",
            },
            {"cedarberg.protected-refs": ""},
        ],  # a child cannot lift a parent's guard
    )
    table = child_table(guarded, "gl")
    to_main = ChangeSummary(frozenset({"add-snapshot", "set-snapshot-ref"}), frozenset({"main"}))
    to_branch = ChangeSummary(frozenset({"set-snapshot-ref"}), frozenset({"etl-staging"}))
    schema = ChangeSummary(frozenset({"add-schema", "set-current-schema"}))
    created = ChangeSummary(frozenset({"add-schema", "set-current-schema"}), creates=True)
    leaving = ChangeSummary(frozenset({"remove-schemas", "remove-snapshot-ref"}), frozenset({"main"}))

    def effect(operation: str, who: Principal, changes: ChangeSummary) -> Verdict:
        return decide_checks(engine, who, operation, effect_checks(operation, table, ctx(who, changes)))

    main_denied = effect("updateTable", WRITER, to_main)
    assert not main_denied.allowed
    assert main_denied.decisions[-1][1].policy_ids == ("protected-refs",)
    assert effect("updateTable", WRITER, to_branch).allowed
    schema_denied = effect("updateTable", WRITER, schema)
    assert schema_denied.decisions[-1][1].policy_ids == ("schema-locked",)
    assert not effect("commitTransaction", WRITER, schema).allowed
    created_ok = effect("updateTable", WRITER, created)
    assert created_ok.allowed
    assert [c.action for c, _ in created_ok.decisions] == ["updateTable", "createTable"]
    # The guards name no action: a rename out of the guarded namespace is judged on its effect.
    out = effect("renameTable", WRITER, leaving)
    assert not out.allowed
    assert set(out.decisions[-1][1].policy_ids) == {"protected-refs", "schema-locked"}
    assert effect("updateTable", ADMIN, to_main).allowed
    assert effect("updateTable", ADMIN, schema).allowed
    assert effect("renameTable", ADMIN, leaving).allowed
    # The request-level decision carries no effect: guards never fire there.
    assert authorize(engine, WRITER, "updateTable", ctx(WRITER), table).allowed


def test_a_policy_can_forbid_schema_changes_through_update_kinds(policy_dir: Path) -> None:
    (policy_dir / "no-schema-changes.cedar").write_text(
        '@id("no-schema-changes")\n'
        'forbid (principal, action == Cedarberg::Action::"updateTable", resource)\n'
        'when { context.update_kinds.containsAny(["add-schema", "set-current-schema"]) };\n'
    )
    eng = PolicyEngine(policy_dir)
    eng.load()
    table = child_table(SALES_NS, "orders")
    schema = ChangeSummary(frozenset({"add-schema"}))
    append = ChangeSummary(frozenset({"add-snapshot", "set-properties"}), property_keys=frozenset({"k"}))
    for who in (ADMIN, WRITER):
        denied = eng.decide(who, "updateTable", table, ctx(who, schema))
        assert not denied.allowed
        assert denied.policy_ids == ("no-schema-changes",)
        assert eng.decide(who, "updateTable", table, ctx(who, append)).allowed


def test_context_carries_auth_method_and_tls_subject(policy_dir: Path) -> None:
    (policy_dir / "admin-mtls.cedar").write_text(
        '@id("admin-api-needs-mtls")\n'
        'forbid (principal, action in Cedarberg::Action::"admin", resource)\n'
        'unless { context.auth_method == "mtls" && context has tls_subject &&\n'
        '         context.tls_subject == "CN=ops" };\n'
    )
    eng = PolicyEngine(policy_dir)
    eng.load()
    with_key = principal("ada", "admins")
    with_cert = principal("ada", "admins", method=AuthMethod.MTLS, tls_subject="CN=ops")
    assert not eng.decide(with_key, "createApiKey", catalog_resource(), ctx(with_key)).allowed
    assert eng.decide(with_cert, "createApiKey", catalog_resource(), ctx(with_cert)).allowed
    assert eng.decide(with_key, "loadTable", child_table(HR_NS, "x"), ctx(with_key)).allowed


def test_the_commented_trusted_engine_example_is_valid_and_trusts_one_client(policy_dir: Path) -> None:
    """The example in trusted-engines.cedar, uncommented, loads and trusts exactly the named
    principal, with the named certificate subject, through gateway tokens; by default nobody."""
    source = policy_dir / "trusted-engines.cedar"
    lines = source.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("// @id("))
    source.write_text("\n".join(line.removeprefix("// ") for line in lines[start:]) + "\n")
    eng = PolicyEngine(policy_dir)
    eng.load()
    subject = "CN=trino-coordinator,OU=Data Platform,O=Example Corp"
    table = child_table(SALES_NS, "orders")

    def trusted(who: Principal) -> bool:
        decision = eng.decide(who, "readRestrictedData", table, ctx(who))
        assert decision.policy_ids in ((), ("trino-coordinator-enforces-restrictions",))
        return decision.allowed

    def trino(method: AuthMethod = AuthMethod.GATEWAY_TOKEN, **attrs: str) -> Principal:
        return Principal("key:trino", PrincipalKind.SERVICE, frozenset({"eu"}), method, attrs)

    assert trusted(trino(tls_subject=subject))
    assert not trusted(trino())  # no client certificate
    assert not trusted(trino(AuthMethod.API_KEY, tls_subject=subject))  # another auth method
    assert not trusted(trino(tls_subject=subject.replace("Example Corp", "Example Corp2")))
    assert not trusted(trino(tls_subject="CN=trino-coordinator,OU=Data Platform"))
    other = Principal("key:eva", PrincipalKind.SERVICE, frozenset({"eu"}), AuthMethod.GATEWAY_TOKEN,
                      {"tls_subject": subject})  # fmt: skip
    assert not trusted(other)  # the certificate alone is not the principal
    assert not eng.decide(trino(tls_subject=subject), "readRestrictedData", child_table(HR_NS, "x"),
                          ctx(trino(tls_subject=subject))).allowed  # fmt: skip


def test_by_default_no_client_is_trusted_with_restricted_data(engine: PolicyEngine) -> None:
    table = child_table(SALES_NS, "orders")
    for who in (
        WRITER,
        READER,
        MEMBER,
        principal("ops", "etl", method=AuthMethod.MTLS, tls_subject="CN=ops"),
    ):
        assert not engine.decide(who, "readRestrictedData", table, ctx(who)).allowed


def test_a_commit_that_creates_its_table_also_needs_create(policy_dir: Path) -> None:
    (policy_dir / "grants.cedar").write_text(
        'permit (principal, action == Cedarberg::Action::"updateTable", resource)\n'
        "when { principal.groups.containsAny(resource.writers) };\n"
    )
    eng = PolicyEngine(policy_dir)
    eng.load()
    table = child_table(SALES_NS, "new")
    plain = ChangeSummary(frozenset({"add-snapshot"}))
    creating = ChangeSummary(frozenset({"add-schema"}), creates=True)
    assert decide_checks(
        eng, WRITER, "updateTable", effect_checks("updateTable", table, ctx(WRITER, plain))
    ).allowed
    verdict = decide_checks(
        eng, WRITER, "updateTable", effect_checks("updateTable", table, ctx(WRITER, creating))
    )
    assert not verdict.allowed
    assert verdict.denied is not None
    assert verdict.denied.action == "createTable"


def test_context_values_are_bounded() -> None:
    identifier = Identifier.of(["sales"], "t")
    many = Effect(
        identifier,
        "table",
        False,
        frozenset({"set-properties"}),
        property_keys=frozenset(f"k{i}" for i in range(MAX_CONTEXT_ITEMS + 1)),
    )
    with pytest.raises(InvalidRequestError, match="too many property keys"):
        ChangeSummary.of_effect(many)
    long_ref = Effect(
        identifier, "table", False, frozenset({"set-snapshot-ref"}), refs=frozenset({"r" * 600})
    )
    with pytest.raises(InvalidRequestError, match="refs longer than"):
        ChangeSummary.of_effect(long_ref)
    fine = Effect(identifier, "table", True, frozenset({"add-schema"}), refs=frozenset({"main"}))
    assert ChangeSummary.of_effect(fine) == ChangeSummary(
        frozenset({"add-schema"}), frozenset({"main"}), creates=True
    )


# -- the operation table -------------------------------------------------------------------------


def test_every_registered_route_has_an_entry() -> None:
    from cedarberg.gateway.web.app import ALL_ROUTES

    check_route_table(route.operation for route in ALL_ROUTES)
    with pytest.raises(UnknownOperationError, match="frobnicate"):
        check_route_table(["loadTable", "frobnicate"])
    with pytest.raises(UnknownOperationError):
        plan_checks("frobnicate", ctx(ADMIN))


def test_public_operations_need_no_decision(engine: PolicyEngine) -> None:
    verdict = authorize(engine, STRANGER, "getToken", ctx(STRANGER))
    assert verdict.allowed
    assert verdict.decisions == ()


def test_action_groups_in_the_schema_match_the_table(policy_dir: Path) -> None:
    for path in policy_dir.glob("*.cedar"):
        path.unlink()
    (policy_dir / "groups.cedar").write_text(
        "".join(
            f'@id("{g}") permit (principal, action in Cedarberg::Action::"{g}", resource);\n'
            for g in ("read", "write", "manage", "admin", "operate", "trust", "console")
        )
    )
    eng = PolicyEngine(policy_dir)
    eng.load()
    for operation in CATALOG_OPS:
        verdict = call(eng, STRANGER, operation, SALES_NS)
        expected = OPERATIONS[operation].group.value
        assert verdict.allowed, operation
        assert verdict.decisions[0][1].policy_ids == (expected,), operation


def test_a_resource_of_the_wrong_kind_is_a_programming_error(engine: PolicyEngine) -> None:
    with pytest.raises(ResourceError):
        authorize(engine, ADMIN, "loadTable", ctx(ADMIN), SALES_NS)


# -- entities ------------------------------------------------------------------------------------


def test_entity_ids_are_unambiguous_paths() -> None:
    table = table_resource("wh", ["a.b", "c/d"], "t%1")
    assert table.uid.id == "wh/a%2Eb.c%2Fd/t%251"
    assert parse_path(table.uid.id) == ("wh", ("a.b", "c/d"), "t%1")
    assert str(table.uid) == 'Cedarberg::Table::"wh/a%2Eb.c%2Fd/t%251"'
    with pytest.raises(ResourceError):
        parse_path("wh//t")


def test_grants_inherit_as_a_union_and_properties_become_tags() -> None:
    ns = namespace_resource(
        "wh",
        ["a", "b"],
        [{"cedarberg.readers": "x, y", "team": "blue"}, {"cedarberg.readers": "z", "team": "red"}],
        warehouse_properties={"cedarberg.writers": "ops"},
    )
    assert ns.grants.readers == {"x", "y", "z"}
    assert ns.grants.writers == {"ops"}
    assert ns.tags == {"cedarberg.readers": "z", "team": "red", "cedarberg.writers": "ops"}
    assert [e["uid"]["type"] for e in ns.entities] == [
        "Cedarberg::Namespace",
        "Cedarberg::Namespace",
        "Cedarberg::Warehouse",
        "Cedarberg::Catalog",
    ]


# -- loading, refusing, reloading ----------------------------------------------------------------


def test_a_syntax_error_is_refused_and_the_last_good_set_stays(policy_dir: Path) -> None:
    eng = PolicyEngine(policy_dir)
    good = eng.load()
    table = child_table(SALES_NS, "orders")
    (policy_dir / "broken.cedar").write_text(
        "// a comment\npermit (\n  principal,\n  action\n  resource\n);\n"
    )
    with pytest.raises(PolicyLoadError) as caught:
        eng.load()
    assert [str(p) for p in caught.value.problems] == ["broken.cedar:5: unexpected token `resource`"]
    assert eng.version == good
    assert eng.last_error is not None
    assert eng.last_error.problems == caught.value.problems
    decision = eng.decide(WRITER, "updateTable", table, ctx(WRITER))
    assert decision.allowed
    assert decision.version == good


def test_a_schema_error_is_refused(policy_dir: Path) -> None:
    eng = PolicyEngine(policy_dir)
    good = eng.load()
    (policy_dir / "typo.cedar").write_text(
        'permit (principal, action, resource)\nwhen {\n  principal.team == "x"\n};\n'
    )
    with pytest.raises(PolicyLoadError) as caught:
        eng.load()
    assert caught.value.problems
    assert all(p.path == "typo.cedar" and p.line == 3 for p in caught.value.problems)
    assert "attribute `team`" in caught.value.problems[0].message
    assert eng.version == good


def test_a_broken_schema_or_a_broken_contract_is_refused(policy_dir: Path) -> None:
    eng = PolicyEngine(policy_dir)
    good = eng.load()
    schema = policy_dir / "schema.cedarschema"
    original = schema.read_text()
    schema.write_text(
        original.replace('entity ApiKey in [Catalog] = { "owner": String };', "entity ApiKey in")
    )
    with pytest.raises(PolicyLoadError) as caught:
        eng.load()
    assert caught.value.problems[0].path == "schema.cedarschema"
    assert caught.value.problems[0].line > 1
    # A schema that parses but no longer declares an action of the operation table.
    schema.write_text(original.replace("fetchScanTasks, ", ""))
    with pytest.raises(PolicyLoadError, match="fetchScanTasks"):
        eng.load()
    # A schema whose entity shapes differ from what the gateway builds.
    schema.write_text(original.replace('"depth": Long,', '"depth": Long,\n    "owner": String,'))
    with pytest.raises(PolicyLoadError, match="do not conform"):
        eng.load()
    assert eng.version == good
    schema.write_text(original)
    assert eng.reload() is ReloadOutcome.UNCHANGED
    assert eng.last_error is None


def test_duplicate_ids_and_templates_are_refused(policy_dir: Path) -> None:
    (policy_dir / "zz-dup.cedar").write_text(
        '@id("readers-read-granted")\npermit (principal, action, resource);\n'
        "permit (principal == ?principal, action, resource);\n"
    )
    with pytest.raises(PolicyLoadError) as caught:
        PolicyEngine(policy_dir).load()
    messages = [str(p) for p in caught.value.problems]
    assert "zz-dup.cedar:1: duplicate policy id 'readers-read-granted' (first at grants.cedar:18)" in messages
    assert any(m.startswith("zz-dup.cedar:3: templates") for m in messages)


def test_nothing_active_means_deny(tmp_path: Path) -> None:
    eng = PolicyEngine(tmp_path / "missing")
    with pytest.raises(PolicyLoadError):
        eng.load()
    decision = eng.decide(ADMIN, "loadTable", child_table(SALES_NS, "t"), ctx(ADMIN))
    assert not decision.allowed
    assert decision.errors == ("no policy set is active",)
    assert eng.reload() is ReloadOutcome.REFUSED


def test_reload_outcomes_and_one_log_line_per_refused_content(
    policy_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    eng = PolicyEngine(policy_dir)
    first = eng.load()
    assert eng.reload() is ReloadOutcome.UNCHANGED
    extra = policy_dir / "extra.cedar"
    extra.write_text(
        '@id("extra") forbid (principal, action, resource) when { principal.groups.contains("x") };\n'
    )
    assert eng.reload() is ReloadOutcome.LOADED
    assert eng.version != first
    extra.write_text("forbid (principal, action resource);\n")
    with caplog.at_level(logging.ERROR, logger="cedarberg.gateway.authz"):
        assert eng.reload() is ReloadOutcome.REFUSED
        assert eng.reload() is ReloadOutcome.REFUSED
    assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1
    assert eng.active is not None
    assert "extra" in eng.active.locations


async def test_hot_reload_picks_up_changes_and_refuses_bad_ones(policy_dir: Path) -> None:
    eng = PolicyEngine(policy_dir)
    eng.load()
    table = child_table(SALES_NS, "orders")

    async def until(predicate: Callable[[], bool]) -> None:
        for _ in range(500):  # up to 10 s; the watcher polls every 50 ms
            if predicate():
                return
            await asyncio.sleep(0.02)
        pytest.fail("the watcher did not react")

    async with PolicyWatcher(eng, interval=0.05) as watcher:
        assert watcher.running
        assert eng.decide(READER, "loadTable", table, ctx(READER)).allowed
        (policy_dir / "lockdown.cedar").write_text(
            '@id("lockdown") forbid (principal, action, resource)\n'
            'unless { principal in Cedarberg::Group::"admins" };\n'
        )
        await until(lambda: not eng.decide(READER, "loadTable", table, ctx(READER)).allowed)
        assert eng.decide(READER, "loadTable", table, ctx(READER)).policy_ids == ("lockdown",)
        version = eng.version

        (policy_dir / "lockdown.cedar").write_text("forbid (principal, action, resource")
        await until(lambda: eng.last_error is not None)
        assert eng.version == version
        assert str(eng.last_error.problems[0]).startswith("lockdown.cedar:1:")  # type: ignore[union-attr]

        (policy_dir / "lockdown.cedar").unlink()
        await until(lambda: eng.decide(READER, "loadTable", table, ctx(READER)).allowed)
        assert eng.last_error is None
        assert await watcher.reload_now() is ReloadOutcome.UNCHANGED
    assert not watcher.running


# -- fixtures and CLI ----------------------------------------------------------------------------


def test_bundled_fixtures_pass() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run_fixture_tests(BUNDLED_POLICY_DIR, out, err) == 0, err.getvalue()
    assert out.getvalue().splitlines()[-1].endswith(" passed, 0 failed")
    assert len(list((BUNDLED_POLICY_DIR / "tests" / "ALLOW").glob("*.json"))) >= 5
    assert len(list((BUNDLED_POLICY_DIR / "tests" / "DENY").glob("*.json"))) >= 5


def test_a_failing_fixture_fails_the_run(policy_dir: Path) -> None:
    allow = policy_dir / "tests" / "ALLOW"
    source = (policy_dir / "tests" / "DENY" / "reader-cannot-commit.json").read_text()
    (allow / "wrong.json").write_text(source)
    (allow / "bad.json").write_text('{"principal": "nope"}')
    out, err = io.StringIO(), io.StringIO()
    assert run_fixture_tests(policy_dir, out, err) == 1
    assert "FAIL ALLOW tests/ALLOW/wrong.json  (expected ALLOW, got DENY)" in out.getvalue()
    assert "FAIL ALLOW tests/ALLOW/bad.json  (bad fixture: missing keys: action, resource)" in out.getvalue()
    assert out.getvalue().splitlines()[-1].endswith(" passed, 2 failed")


def test_validate_prints_file_and_line(policy_dir: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert validate(policy_dir, out, err) == 0
    assert validate_summary(BUNDLED_POLICY_DIR) in out.getvalue()
    (policy_dir / "zz.cedar").write_text(
        "permit (principal, action, resource);\n\npermit (principal, action, resource)\nwhen { x };\n"
    )
    out, err = io.StringIO(), io.StringIO()
    assert validate(policy_dir, out, err) == 1
    assert f"{policy_dir}/zz.cedar:4: invalid variable: x" in err.getvalue().splitlines()


def test_explain_prints_the_decision_and_determining_policies() -> None:
    out = io.StringIO()
    code = explain(
        BUNDLED_POLICY_DIR,
        ExplainQuery(
            PrincipalSpec("erin", ["etl"]),
            "updateTable",
            ResourceSpec(
                "default/sales.eu/orders",
                properties=["sales:cedarberg.writers=etl", "sales:cedarberg.protected-refs=main"],
            ),
            ContextSpec(update_kinds=["set-snapshot-ref"], refs=["main"]),
        ),
        out=out,
    )
    assert code == 1
    text = out.getvalue()
    assert "decision:  DENY" in text
    assert "protected-refs  (guards.cedar:14)" in text
    out = io.StringIO()
    assert (
        explain(
            BUNDLED_POLICY_DIR,
            ExplainQuery(
                PrincipalSpec("ana", ["analysts"]),
                "listNamespaces",
                ResourceSpec("default/sales", properties=["sales:cedarberg.readers=analysts"]),
            ),
            out=out,
        )
        == 0
    )
    assert "readers-read-granted" in out.getvalue()
    err = io.StringIO()
    query = ExplainQuery(PrincipalSpec("x", []), "loadTable", ResourceSpec("default"))
    assert explain(BUNDLED_POLICY_DIR, query, out=io.StringIO(), err=err) == 2
    assert "expects WAREHOUSE/NS/TABLE" in err.getvalue()


async def test_a_file_written_in_place_is_loaded_only_once_it_holds_still(policy_dir: Path) -> None:
    """An editor or a copy rewriting a file in place shows it truncated for a moment: an empty
    file is a valid set without the file's `forbid`. The watcher loads a change only once the
    next poll sees it unchanged, so the moment in between is never decided on."""
    lockdown = policy_dir / "lockdown.cedar"
    lockdown.write_text('@id("lockdown") forbid (principal, action, resource);\n')
    eng = PolicyEngine(policy_dir)
    eng.load()
    table = child_table(SALES_NS, "orders")
    watcher = PolicyWatcher(eng, interval=60)  # polled by hand below
    assert await watcher.check() is None  # the first poll only notes the directory
    assert await watcher.check() is ReloadOutcome.UNCHANGED
    before = eng.version

    lockdown.write_text("")  # truncated, mid-write
    assert await watcher.check() is None
    assert not eng.decide(READER, "loadTable", table, ctx(READER)).allowed  # the forbid holds
    lockdown.write_text('@id("lockdown") forbid (principal, action, resource);\n// v2\n')
    assert await watcher.check() is None  # moved again since the last poll
    assert not eng.decide(READER, "loadTable", table, ctx(READER)).allowed
    assert eng.version == before
    assert await watcher.check() is ReloadOutcome.LOADED  # held still: loaded
    assert eng.version != before
    assert eng.decide(READER, "loadTable", table, ctx(READER)).policy_ids == ("lockdown",)
