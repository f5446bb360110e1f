"""Decisions keyed by what the policies can see of a resource (`gateway/authz/sight.py`).

Resources a policy set cannot tell apart share one cached decision: namespaces and tables being
created under new names stop costing a Cedar evaluation each. The attack is a policy that *can*
tell them apart (by name, by uid literal, by ancestor, by tag, by grant): the cached engine must
decide every request exactly as Cedar does from scratch. The property below checks that over
generated policy sets and request sequences; the examples after it pin each way a policy can
see a resource, and that the legitimate use (many new names, one evaluation) gets the hits.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import cedarpy
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import entities
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import Decision, PolicyEngine
from cedarberg.gateway.authz.sight import PolicySight
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.policies import generated_engine

WAREHOUSE = "w"
GROUPS = ("g0", "g1")
NAMES = ("s1", "s2", "a1")
TABLES = ("t1", "t2")
NAMESPACE_ACTIONS = ("createNamespace", "loadNamespaceMetadata")
TABLE_ACTIONS = ("createTable", "loadTable")
NS = "Cedarberg::Namespace"
TABLE = "Cedarberg::Table"


def _ns_uid(*levels: str) -> str:
    return f'{NS}::"{entities.namespace_id(WAREHOUSE, levels)}"'


def _table_uid(levels: tuple[str, ...], name: str) -> str:
    return f'{TABLE}::"{entities.object_id(WAREHOUSE, levels, name)}"'


# The ways a policy can see a namespace or a table, each valid for its type: by name (which puts
# every name in the key), and by structure (uid literals, ancestors, tags, grants), which the key
# must honour while still sharing decisions between names. Drawn so that sets without a name
# reader, where sharing happens, are common.
_NAME_READERS = {
    NS: ('resource.namespace like "s*"', 'resource.namespace == "a1.s2"', "resource.depth == 2"),
    TABLE: ('resource.name == "t1"', 'resource.name like "t*" && resource.namespace like "a*"'),
}
_STRUCTURE_READERS = {
    NS: (
        f"resource == {_ns_uid('s1')}",
        f"resource in {_ns_uid('a1')}",
        f"[{_ns_uid('s2')}, {_ns_uid('a1', 's1')}].contains(resource)",
        'resource.hasTag("owner") && resource.getTag("owner") == "g1"',
        "principal.groups.containsAny(resource.writers)",
        'resource has protected_refs && resource.protected_refs.contains("main")',
    ),
    TABLE: (
        f"resource == {_table_uid(('s1',), 't2')}",
        f"resource in {_ns_uid('s1')}",
        f"resource in {_ns_uid('a1', 's2')}",
        'resource.hasTag("owner")',
        "principal.groups.containsAny(resource.readers)",
        "resource.schema_locked",
    ),
}
_ACTIONS = {NS: NAMESPACE_ACTIONS, TABLE: TABLE_ACTIONS}


@st.composite
def _policy(draw: st.DrawFn, index: int) -> str:
    effect = draw(st.sampled_from(("permit", "permit", "forbid")))
    kind = draw(st.sampled_from((NS, TABLE)))
    condition = st.one_of(
        st.sampled_from(_STRUCTURE_READERS[kind]),
        st.sampled_from(_STRUCTURE_READERS[kind]),
        st.sampled_from(_STRUCTURE_READERS[kind]),
        st.sampled_from(_NAME_READERS[kind]),
    )
    action = draw(
        st.sampled_from(("action", *(f'action == Cedarberg::Action::"{a}"' for a in _ACTIONS[kind])))
    )
    principal = draw(
        st.sampled_from(("principal", *(f'principal in Cedarberg::Group::"{g}"' for g in GROUPS)))
    )
    parts = draw(st.lists(condition, min_size=1, max_size=2))
    clause = f"{draw(st.sampled_from(('when', 'unless')))} {{ {' && '.join(parts)} }}"
    return f'@id("p{index}")\n{effect} ({principal}, {action}, resource is {kind}) {clause};\n'


# Few distinct sets, so that siblings often have equal properties and differ only in their names.
_properties = st.sampled_from(
    (
        {},
        {},
        {"cedarberg.writers": "g0"},
        {"cedarberg.readers": "g1", "cedarberg.protected-refs": "main"},
        {"cedarberg.schema-locked": "true"},
        {"owner": "g1"},
    )
)


def _universe(properties: dict[str, dict[str, str]]) -> list[tuple[str, entities.Resource]]:
    """Every request on every namespace (one or two levels) and table of the example's tree. Each
    namespace name has one set of properties, so many siblings differ only in their names: the
    case the keys must get right."""
    requests: list[tuple[str, entities.Resource]] = []
    for levels in [(n,) for n in NAMES] + [(n, m) for n in NAMES for m in NAMES]:
        namespace = entities.namespace_resource(WAREHOUSE, levels, [properties[level] for level in levels])
        requests += [(action, namespace) for action in NAMESPACE_ACTIONS]
        for table in TABLES:
            requests += [(action, entities.child_table(namespace, table)) for action in TABLE_ACTIONS]
    return requests


def _fresh(engine: PolicyEngine, principal: Principal, action: str, resource: entities.Resource) -> Decision:
    """The decision Cedar makes from scratch: every entity as JSON, no cache."""
    active = engine.active
    assert active is not None
    entity_json = orjson.dumps([*entities.principal_entities(principal), *resource.entities]).decode()
    result = cedarpy.is_authorized(
        {
            "principal": entities.principal_uid(principal).to_json(),
            "action": entities.EntityUid.action(action).to_json(),
            "resource": resource.uid.to_json(),
            "context": RequestContext.of(principal, "127.0.0.1").to_cedar(),
        },
        active.policies,
        cedarpy.Entities.from_json_str(entity_json, active.schema),
        active.schema,
    )
    allowed = result.decision == cedarpy.Decision.Allow
    reasons = tuple(result.diagnostics.reasons) if result.decision != cedarpy.Decision.NoDecision else ()
    return Decision(
        allowed,
        reasons,
        active.version,
        (),
        str(entities.principal_uid(principal)),
        action,
        str(resource.uid),
    )


def _outcome(decision: Decision) -> tuple[object, ...]:
    """A decision as Cedar means it: its determining policies are a set (cedarpy's order varies)."""
    return (
        decision.allowed,
        frozenset(decision.policy_ids),
        decision.errors,
        decision.principal,
        decision.resource,
    )


def _user(groups: frozenset[str]) -> Principal:
    return Principal("key:u", PrincipalKind.USER, groups, AuthMethod.API_KEY)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policies=st.integers(min_value=1, max_value=3).flatmap(
        lambda n: st.tuples(*(_policy(i) for i in range(n))).map("".join)
    ),
    groups=st.frozensets(st.sampled_from(GROUPS), max_size=2),
    requests=st.fixed_dictionaries({name: _properties for name in NAMES}).flatmap(
        lambda properties: st.permutations(_universe(properties))
    ),
)
def test_cached_decisions_equal_fresh_ones_for_every_sequence(
    policies: str, groups: frozenset[str], requests: list[tuple[str, entities.Resource]]
) -> None:
    """Every request of a small tree, in a drawn order, decided through the cache equals Cedar's
    decision from scratch."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = generated_engine(Path(tmp), policies)
        principal = _user(groups)
        context = RequestContext.of(principal, "127.0.0.1")
        fresh = {
            (action, str(resource.uid)): _outcome(_fresh(engine, principal, action, resource))
            for action, resource in requests
        }
        for action, resource in requests:
            decided = engine.decide(principal, action, resource, context)
            assert _outcome(decided) == fresh[action, str(resource.uid)], (policies, action, resource)


# -- what the policies can see, example by example ------------------------------------------------


def _sight(text: str) -> PolicySight:
    return PolicySight.of(orjson.loads(cedarpy.policies_to_json_str(text))["staticPolicies"].values())


def test_the_sight_collects_attributes_literals_and_tag_reads() -> None:
    sight = _sight(
        f"permit (principal, action, resource in {_ns_uid('s1')}) when {{ resource has a.b && resource.c }};"
        f"forbid (principal, action, resource) when {{ [{_table_uid(('s1',), 't1')}].contains(resource) }};"
    )
    assert {"a", "b", "c"} <= sight.attributes
    assert (NS, entities.namespace_id(WAREHOUSE, ("s1",))) in sight.uid_literals
    assert (TABLE, entities.object_id(WAREHOUSE, ("s1",), "t1")) in sight.uid_literals
    assert not sight.reads_tags
    assert _sight('permit (principal, action, resource) when { resource.hasTag("x") };').reads_tags


def _keys(sight: PolicySight, *resources: entities.Resource) -> set[str]:
    return {sight.decision_key(resource) for resource in resources}


def test_resources_the_policies_cannot_tell_apart_share_a_key() -> None:
    sight = _sight(
        "permit (principal, action, resource) when { principal.groups.containsAny(resource.writers) };"
    )
    parent = entities.namespace_resource(WAREHOUSE, ("s1",), [{"cedarberg.writers": "g0"}])
    fresh = [entities.child_namespace(parent, f"new{i}", {"comment": str(i)}) for i in range(5)]
    assert len(_keys(sight, *fresh)) == 1
    # What the policies read is in the key: another grant, another parent, another type.
    assert (
        len(_keys(sight, fresh[0], entities.child_namespace(parent, "x", {"cedarberg.writers": "g1"}))) == 2
    )
    other = entities.namespace_resource(WAREHOUSE, ("s2",), [{"cedarberg.writers": "g0"}])
    assert len(_keys(sight, fresh[0], entities.child_namespace(other, "new0"))) == 2
    assert len(_keys(sight, fresh[0], entities.child_table(parent, "new0"))) == 2


def test_a_name_the_policies_read_or_a_uid_they_name_is_in_the_key() -> None:
    parent = entities.namespace_resource(WAREHOUSE, ("s1",))
    by_name = _sight(
        "forbid (principal, action, resource is Cedarberg::Namespace) "
        'when { resource.namespace like "s1.x*" };'
    )
    assert (
        len(_keys(by_name, entities.child_namespace(parent, "x1"), entities.child_namespace(parent, "y1")))
        == 2
    )
    by_uid = _sight(f"forbid (principal, action, resource == {_ns_uid('s1', 'x1')});")
    named, others = (
        entities.child_namespace(parent, "x1"),
        [entities.child_namespace(parent, n) for n in ("y1", "y2")],
    )
    assert len(_keys(by_uid, *others)) == 1
    assert len(_keys(by_uid, named, *others)) == 2
    by_tag = _sight('forbid (principal, action, resource) when { resource.hasTag("pii") };')
    tagged = entities.child_namespace(parent, "y3", {"pii": "yes"})
    assert len(_keys(by_tag, tagged, *others)) == 2


BUILDERS = (
    '@id("builders")\npermit (principal in Cedarberg::Group::"g0", '
    'action == Cedarberg::Action::"createNamespace", resource is Cedarberg::Namespace);\n'
)
NO_LEGACY = f'@id("no-legacy")\nforbid (principal, action, resource == {_ns_uid("legacy")});\n'
NO_SECRETS = (
    '@id("no-secrets")\nforbid (principal, action, resource is Cedarberg::Namespace) '
    'when { resource.namespace like "secret*" };\n'
)


def _create_all(engine: PolicyEngine, names: list[str]) -> list[Decision]:
    builder = _user(frozenset({"g0"}))
    context = RequestContext.of(builder, "127.0.0.1")
    warehouse = entities.warehouse_resource(WAREHOUSE)
    return [
        engine.decide(builder, "createNamespace", entities.child_namespace(warehouse, n), context)
        for n in names
    ]


def test_new_names_are_decided_once_and_each_decision_names_its_resource(tmp_path: Path) -> None:
    engine = generated_engine(tmp_path, BUILDERS + NO_LEGACY)
    names = [f"n{i}" for i in range(20)]
    decided = _create_all(engine, names)
    assert all(d.allowed and d.policy_ids == ("builders",) for d in decided)
    assert [d.resource for d in decided] == [_ns_uid(n) for n in names]
    assert engine.decision_hits == 19
    # Attack: the uid a policy names is decided on its own, among cached new names.
    denied, allowed = _create_all(engine, ["legacy", "n99"])
    assert (denied.allowed, denied.policy_ids, denied.resource) == (False, ("no-legacy",), _ns_uid("legacy"))
    assert allowed.allowed
    assert engine.decision_hits == 20


def test_a_policy_that_reads_names_gets_every_name_decided(tmp_path: Path) -> None:
    engine = generated_engine(tmp_path, BUILDERS + NO_SECRETS)
    decided = _create_all(engine, ["open_1", "secret_1", "open_2", "secret_2"])
    assert [(d.allowed, d.policy_ids) for d in decided] == [
        (True, ("builders",)),
        (False, ("no-secrets",)),
        (True, ("builders",)),
        (False, ("no-secrets",)),
    ]
    assert engine.decision_hits == 0


def test_the_bundled_policies_tell_new_names_apart_only_by_grants() -> None:
    engine = PolicyEngine(BUNDLED_POLICY_DIR)
    engine.load()
    assert engine.active is not None
    sight = engine.active.sight
    assert not sight.reads_tags
    assert {"namespace", "name"}.isdisjoint(sight.attributes)
    assert not any(kind in (NS, TABLE) for kind, _ in sight.uid_literals)


def test_a_listing_decides_each_key_once_and_names_every_resource(tmp_path: Path) -> None:
    engine = generated_engine(
        tmp_path,
        '@id("readers")\npermit (principal, action == Cedarberg::Action::"loadTable", '
        "resource is Cedarberg::Table) when { principal.groups.containsAny(resource.readers) };\n"
        f'@id("not-t9")\nforbid (principal, action, resource == {_table_uid(("s1",), "t9")});\n',
    )
    reader = _user(frozenset({"g0"}))
    context = RequestContext.of(reader, "127.0.0.1")
    granted = entities.namespace_resource(WAREHOUSE, ("s1",), [{"cedarberg.readers": "g0"}])
    other = entities.namespace_resource(WAREHOUSE, ("s2",))
    tables = [entities.child_table(ns, f"t{i}") for ns in (granted, other) for i in range(10)]
    decided = engine.decide_many(reader, [("loadTable", table, context) for table in tables])
    assert [_outcome(d) for d in decided] == [
        _outcome(_fresh(engine, reader, "loadTable", t)) for t in tables
    ]
    assert [d.allowed for d in decided] == [True] * 9 + [False] * 11
    assert len(engine._decisions) == 3  # the granted tables, t9, and the other namespace's tables
