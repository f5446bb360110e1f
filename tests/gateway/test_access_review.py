"""The access review (`gateway/authz/review.py`, `residuals.py`) against concrete Cedar decisions.

Over generated policy sets (permits and forbids naming groups, principals, actions, resources,
with `when`/`unless` conditions on groups, grants, tags and the context) and the bundled
policies: every known subject the review says is allowed is allowed by `cedarpy.is_authorized`
with the same request, and every one it leaves out is denied; and the residual conditions the
review prints, parsed back as Cedar and decided for each subject, decide as the full set does.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import cedarpy
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import review
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import (
    EntityUid,
    Resource,
    principal_entities,
    principal_uid,
    table_resource,
)
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.residuals import residuals_of
from cedarberg.gateway.authz.review_cli import print_resource_review
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.policies import generated_engine

GROUPS = ("g0", "g1", "g2", "admins")
USERS = ("key:u0", "key:u1", "oidc:corp/u2")
ACTIONS = ("loadTable", "updateTable", "planTableScan", "dropTable")
TABLE = 'Cedarberg::Table::"default/sales/orders"'

# -- generated policy sets ------------------------------------------------------------------------

_principal_scope = st.one_of(
    st.just("principal"),
    st.sampled_from(GROUPS).map(lambda g: f'principal in Cedarberg::Group::"{g}"'),
    st.sampled_from(USERS).map(lambda u: f'principal == Cedarberg::User::"{u}"'),
)
_action_scope = st.one_of(
    st.just("action"),
    st.sampled_from(ACTIONS).map(lambda a: f'action == Cedarberg::Action::"{a}"'),
    st.sampled_from(("read", "write")).map(lambda g: f'action in Cedarberg::Action::"{g}"'),
    st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3, unique=True).map(
        lambda acts: "action in [" + ", ".join(f'Cedarberg::Action::"{a}"' for a in acts) + "]"
    ),
)
# Every scope names tables only, so that conditions on grants and tags validate.
_resource_scope = st.sampled_from(
    (
        "resource is Cedarberg::Table",
        'resource is Cedarberg::Table in Cedarberg::Namespace::"default/sales"',
        'resource is Cedarberg::Table in Cedarberg::Namespace::"default/other"',
        f"resource == {TABLE}",
    )
)
_condition = st.one_of(
    st.sampled_from(GROUPS).map(lambda g: f'principal.groups.contains("{g}")'),
    st.just("principal.groups.containsAny(resource.readers)"),
    st.just("principal.groups.containsAny(resource.writers)"),
    st.just("principal.groups.isEmpty()"),
    st.sampled_from(("jwt", "api-key")).map(lambda m: f'context.auth_method == "{m}"'),
    st.just('context has tls_subject && context.tls_subject == "CN=x"'),
    st.just('context.refs.contains("main")'),
    st.just('resource.hasTag("owner") && resource.getTag("owner") == "g1"'),
    st.just('principal.hasTag("email")'),
    st.sampled_from(GROUPS).map(lambda g: f'principal in Cedarberg::Group::"{g}"'),
)


@st.composite
def _policy(draw: st.DrawFn, index: int) -> str:
    effect = draw(st.sampled_from(("permit", "permit", "forbid")))
    scope = f"{draw(_principal_scope)}, {draw(_action_scope)}, {draw(_resource_scope)}"
    clauses = ""
    for kind in ("when", "unless"):
        if draw(st.booleans()):
            parts = draw(st.lists(_condition, min_size=1, max_size=2))
            joiner = draw(st.sampled_from((" && ", " || ")))
            clauses += f" {kind} {{ {joiner.join(parts)} }}"
    return f'@id("p{index}")\n{effect} ({scope}){clauses};\n'


@st.composite
def _policy_set(draw: st.DrawFn) -> str:
    count = draw(st.integers(min_value=1, max_value=6))
    return "".join(draw(_policy(i)) for i in range(count))


_properties = st.fixed_dictionaries(
    {},
    optional={
        "cedarberg.readers": st.lists(st.sampled_from(GROUPS), max_size=2).map(",".join),
        "cedarberg.writers": st.lists(st.sampled_from(GROUPS), max_size=2).map(",".join),
        "owner": st.sampled_from(("g1", "g2")),
    },
)
_known = st.lists(
    st.tuples(st.sampled_from(USERS), st.frozensets(st.sampled_from(GROUPS), max_size=3), st.booleans()),
    max_size=4,
)


def _cedar_allows(
    engine: PolicyEngine,
    policies: cedarpy.PolicySet | str,
    principal: Principal,
    request: tuple[str, Resource, dict[str, Any]],
) -> bool:
    """The decision of a request, made by cedarpy directly from JSON (not by the engine), with the
    schema (which holds the action groups)."""
    assert engine.active is not None
    action, resource, ctx = request
    entities = [*principal_entities(principal), *resource.entities]
    decided = cedarpy.is_authorized(
        {
            "principal": principal_uid(principal).to_json(),
            "action": EntityUid.action(action).to_json(),
            "resource": resource.uid.to_json(),
            "context": ctx,
        },
        policies,
        orjson.dumps(entities).decode(),
        engine.active.schema,
    )
    return decided.allowed


def _review_agrees(
    engine: PolicyEngine, resource: Resource, known: list[review.KnownPrincipal], method: str
) -> None:
    assert engine.active is not None
    context = review.ReviewContext(AuthMethod(method))
    ctx = context.request().to_cedar()
    actions = list(ACTIONS)
    audience = review.known_subjects(known, review.residual_groups(engine, resource, actions))
    result = review.review_resource(engine, resource, actions, audience, context)
    policy_text = (engine.directory / "generated.cedar").read_text()
    for action_review in result.actions:
        allowed_ids = {(a.subject.principal.id, a.subject.principal.groups) for a in action_review.allowed}
        for subject in audience.subjects:
            who = subject.principal
            request = (action_review.action, resource, ctx)
            truth = _cedar_allows(engine, engine.active.policies, who, request)
            assert ((who.id, who.groups) in allowed_ids) == truth, (action_review.action, who, policy_text)
            # The printed residuals, parsed back as Cedar, decide this subject as the full set does.
            partial = review.partial(engine, action_review.action, resource, None)
            decided = partial.diagnostics.reasons  # policies satisfied whoever asks, however
            residual_text = "".join(
                f'@id("{r.policy_id}")\n{r.effect} (principal, action, resource) {r.condition};\n'
                for r in residuals_of(partial)
            )
            residual_text += "".join(
                f'@id("{pid}")\n{_effect(policy_text, pid)} (principal, action, resource);\n'
                for pid in decided
            )
            assert _cedar_allows(engine, residual_text, who, request) == truth, (
                action_review.action,
                who,
                policy_text,
                residual_text,
            )
        if action_review.everyone:  # whoever asks: every subject, named or not, is allowed
            assert all((s.principal.id, s.principal.groups) in allowed_ids for s in audience.subjects), (
                policy_text
            )


def _effect(policy_text: str, policy_id: str) -> str:
    after = policy_text.split(f'@id("{policy_id}")\n', 1)[1]
    return "permit" if after.startswith("permit") else "forbid"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policies=_policy_set(),
    properties=_properties,
    known=_known,
    method=st.sampled_from(("api-key", "jwt")),
)
def test_review_agrees_with_concrete_decisions(
    policies: str, properties: dict[str, str], known: list[tuple[str, frozenset[str], bool]], method: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine = generated_engine(Path(tmp), policies)
        resource = table_resource("default", ["sales"], "orders", [properties])
        principals = [
            review.KnownPrincipal(
                Principal(
                    pid, PrincipalKind.USER, groups, AuthMethod(method), {"email": "x@y"} if tagged else {}
                ),
                review.SubjectSource.STATED,
            )
            for pid, groups, tagged in known
        ]
        _review_agrees(engine, resource, principals, method)


# -- fixtures: the bundled policies and a restricted permit --------------------------------------

RESTRICTED = """
@id("analysts-eu-orders")
@columns("order_id, region")
@row_filter("region = 'eu'")
permit (principal in Cedarberg::Group::"analysts",
        action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],
        resource == Cedarberg::Table::"default/sales/orders");
"""


@pytest.fixture
def bundled(tmp_path: Path) -> PolicyEngine:
    for source in BUNDLED_POLICY_DIR.glob("*.ceda*"):
        shutil.copy(source, tmp_path / source.name)
    (tmp_path / "restricted.cedar").write_text(RESTRICTED)
    engine = PolicyEngine(tmp_path)
    engine.load()
    return engine


def _orders() -> Resource:
    grants = {"cedarberg.readers": "bi", "cedarberg.writers": "etl", "cedarberg.protected-refs": "main"}
    return table_resource("default", ["sales"], "orders", [grants])


def test_the_review_shows_an_issuers_scoped_groups_as_their_own(bundled: PolicyEngine) -> None:
    # A grant naming the partner issuer's scoped group and the bare `analysts`: the review lists
    # them as two groups, and a member of the partner's `admins` (scoped) is not an admin.
    grants = {"cedarberg.readers": "analysts,partner/analysts"}
    resource = table_resource("default", ["shared"], "t", [grants])
    partner_admin = Principal(
        "oidc:partner/p", PrincipalKind.USER, frozenset({"partner/admins"}), AuthMethod.JWT
    )
    known = [review.KnownPrincipal(partner_admin, review.SubjectSource.STATED)]
    actions = ["loadTable", "dropTable"]
    audience = review.known_subjects(known, review.residual_groups(bundled, resource, actions))
    assert bundled.active is not None
    document = review.review_resource(bundled, resource, actions, audience).to_json(bundled.active.locations)
    by_action = {a["action"]: a for a in document["actions"]}
    assert {"analysts", "partner/analysts"} <= {g["group"] for g in by_action["loadTable"]["groups"]}
    assert "partner/admins" not in {g["group"] for g in by_action["loadTable"]["groups"]}
    assert {g["group"] for g in by_action["dropTable"]["groups"]} == {"admins"}
    assert by_action["dropTable"]["principals"] == []


def test_bundled_policies_review_a_granted_table(bundled: PolicyEngine) -> None:
    erin = Principal("key:erin", PrincipalKind.SERVICE, frozenset({"etl"}), AuthMethod.API_KEY)
    outsider = Principal("key:zed", PrincipalKind.USER, frozenset({"sales"}), AuthMethod.API_KEY)
    known = [review.KnownPrincipal(p, review.SubjectSource.API_KEY) for p in (erin, outsider)]
    resource = _orders()
    actions = ["loadTable", "updateTable", "planTableScan"]
    audience = review.known_subjects(known, review.residual_groups(bundled, resource, actions))
    assert bundled.active is not None
    document = review.review_resource(bundled, resource, actions, audience).to_json(bundled.active.locations)
    by_action = {a["action"]: a for a in document["actions"]}

    load = by_action["loadTable"]
    assert {g["group"] for g in load["groups"]} == {"admins", "bi", "etl", "analysts"}
    assert [p["id"] for p in load["principals"]] == ["key:erin"]  # key:zed is in no granted group
    assert not load["everyone"]
    assert not load["members_of_no_group"]
    assert {g["group"] for g in by_action["updateTable"]["groups"]} == {"admins", "etl"}

    # The restricted permit's columns and rows show where it is the only way in; a grant lifts them.
    plan = {g["group"]: g for g in by_action["planTableScan"]["groups"]}
    assert plan["analysts"]["restrictions"] == [
        {
            "policy_id": "analysts-eu-orders",
            "columns": ["order_id", "region"],
            "row_filter": "region = 'eu'",
            "masks": {},
        }
    ]
    assert plan["bi"]["restrictions"] == []

    # The guard on protected refs is a condition on the context, said so, not decided by guessing.
    guards = [c for c in by_action["updateTable"]["conditions"] if c["policy_id"] == "protected-refs"]
    assert guards
    assert guards[0]["effect"] == "forbid"
    assert guards[0]["context_dependent"]
    assert "context.refs" in guards[0]["reads"]
    assert '"main"' in guards[0]["condition"]
    grant = [c for c in by_action["updateTable"]["conditions"] if c["policy_id"] == "writers-write-granted"]
    assert grant[0]["condition"] == 'when { (principal.groups).containsAny(["etl"]) }'
    assert grant[0]["location"] == "grants.cedar:26"


def test_a_policy_naming_an_unlisted_principal_shows_as_a_condition(tmp_path: Path) -> None:
    engine = generated_engine(
        tmp_path,
        '@id("dana")\npermit (principal == Cedarberg::User::"oidc:corp/dana", action, resource);\n',
    )
    resource = _orders()
    audience = review.known_subjects([], review.residual_groups(engine, resource, ["loadTable"]))
    (action,) = review.review_resource(engine, resource, ["loadTable"], audience).actions
    assert action.allowed == []  # no key holds that principal: nobody known is allowed ...
    (condition,) = action.residuals  # ... and the condition says who would be
    assert condition.condition == 'when { principal == Cedarberg::User::"oidc:corp/dana" }'


def test_an_unconditional_permit_is_everyone_and_a_forbid_on_context_stays_a_condition(
    tmp_path: Path,
) -> None:
    engine = generated_engine(
        tmp_path,
        '@id("all")\npermit (principal, action == Cedarberg::Action::"loadTable", resource);\n'
        '@id("no-jwt")\nforbid (principal, action, resource) when { context.auth_method == "jwt" };\n',
    )
    resource = _orders()
    audience = review.known_subjects([], [])
    (by_key,) = review.review_resource(engine, resource, ["loadTable"], audience).actions
    assert by_key.everyone
    assert by_key.allowed
    jwt = review.ReviewContext(AuthMethod.JWT)
    (by_jwt,) = review.review_resource(engine, resource, ["loadTable"], audience, jwt).actions
    assert not by_jwt.everyone
    assert not by_jwt.allowed
    conditions = {r.policy_id: r for r in by_jwt.residuals}
    assert conditions["all"].condition == ""  # applies to every request
    assert not conditions["all"].context_dependent
    assert conditions["no-jwt"].condition == 'when { (context.auth_method) == "jwt" }'
    assert conditions["no-jwt"].context_dependent
    assert conditions["no-jwt"].effect == "forbid"


def test_actions_are_those_of_the_resource_type() -> None:
    table_actions = review.chosen_actions(_orders().kind, [])
    assert "loadTable" in table_actions
    assert "loadView" not in table_actions
    assert "createNamespace" not in table_actions
    with pytest.raises(ResourceError, match="loadView"):
        review.chosen_actions(_orders().kind, ["loadView"])


def test_subjects_are_bounded() -> None:
    known = [
        review.KnownPrincipal(
            Principal(f"key:p{i}", PrincipalKind.USER, frozenset({f"g{i}"}), AuthMethod.API_KEY),
            review.SubjectSource.API_KEY,
        )
        for i in range(30)
    ]
    audience = review.known_subjects(known, [], limit=40)
    assert len(audience.subjects) == 40
    assert audience.truncated
    assert not review.known_subjects(known, []).truncated  # 30 principals + 30 groups + no group


def test_principal_review_lists_what_it_may_do(bundled: PolicyEngine) -> None:
    namespace = _orders().parent
    assert namespace is not None
    orders = _orders()
    bi = Principal("key:bea", PrincipalKind.USER, frozenset({"bi"}), AuthMethod.API_KEY)
    document = review.review_principal(bundled, bi, review.Listing([namespace, orders])).to_json()
    ns_actions = {a["action"] for a in document["objects"][0]["actions"]}
    table_actions = {a["action"] for a in document["objects"][1]["actions"]}
    assert {"loadNamespaceMetadata", "listTables"} <= ns_actions
    assert "createNamespace" not in ns_actions  # manage: admins only
    assert {"loadTable", "planTableScan"} <= table_actions
    assert "updateTable" not in table_actions
    for action in ("loadTable", "updateTable", "dropTable"):
        truth = bundled.decide(bi, action, orders, review.ReviewContext().request()).allowed
        assert (action in table_actions) == truth


# -- the command line ------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The offline review: run where no deployment is found (an empty directory, no `CEDARBERG_*`
    variable), so the answer is the stated principals and grants only."""
    with tempfile.TemporaryDirectory() as nowhere:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
        return subprocess.run(
            [sys.executable, "-m", "cedarberg.gateway.cli", "policies", "review", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=nowhere,
            env=env,
        )


def test_cli_reviews_a_table_offline() -> None:
    run = _cli(
        "--resource", "default/sales/orders", "--action", "loadTable",
        "--property", "sales:cedarberg.readers=bi", "--subject", "key:erin=bi", "--subject", "key:zed=sales",
        "--json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (action,) = orjson.loads(run.stdout)["actions"]
    assert [p["id"] for p in action["principals"]] == ["key:erin"]
    assert {g["group"] for g in action["groups"]} == {"admins", "bi"}
    text = _cli(
        "--resource",
        "default/sales/orders",
        "--action",
        "loadTable",
        "--property",
        "sales:cedarberg.readers=bi",
    )
    assert text.returncode == 0
    assert "group bi: readers-read-granted" in text.stdout
    assert 'when { (principal.groups).containsAny(["bi"]) }' in text.stdout


def test_cli_reviews_a_principal_and_refuses_bad_input() -> None:
    run = _cli(
        "--principal", "key:bea", "--group", "bi", "--resource", "default/sales", "--table", "orders",
        "--property", "sales:cedarberg.readers=bi",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "loadTable: readers-read-granted" in run.stdout
    assert "updateTable" not in run.stdout
    wrong = _cli("--resource", "default/sales/orders", "--action", "loadView")
    assert wrong.returncode == 2
    assert "loadView" in wrong.stderr
    not_namespace = _cli("--principal", "key:bea", "--resource", "default/sales/orders")
    assert not_namespace.returncode == 2
    assert "namespace" in not_namespace.stderr


def test_run_review_prints_to_the_given_streams(bundled: PolicyEngine) -> None:
    audience = review.known_subjects([], ["bi"])
    document = review.review_resource(bundled, _orders(), ["loadTable"], audience).to_json({})
    out = io.StringIO()
    print_resource_review(document, out)
    assert "group bi: readers-read-granted" in out.getvalue()
