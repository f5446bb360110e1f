"""`cedarberg policies validate|test|explain`: the security team's tools, on a policy directory.

    cedarberg policies validate [DIR]     exit 1 and `FILE:LINE: message` lines when the set is refused
    cedarberg policies test [DIR]         run DIR/tests/{ALLOW,DENY}/*.json; exit 1 if any fails
    cedarberg policies explain --principal key:alice --group etl --action updateTable \\
        --resource default/sales/orders --property 'sales:cedarberg.writers=etl'
                                          print the decision and its determining policies, where
                                          its restrictions cannot bind (`binding`), the
                                          policy directory and where the grants came from;
                                          exit 0 allow, 1 deny, 2 bad input or refused set,
                                          3 the grants cannot be read
    cedarberg policies review --resource default/sales/orders [--action loadTable] ...
                                          who may do what there, and under which conditions
                                          (`review_cli.py`)

This module decides on what it is given: a policy directory, and for `explain` a `GrantReader`
(the `--property` grants alone, or a deployment's registry under them). Which directory and which
grants — the deployment's settings, loaded as `serve` loads them — `gateway.cli.policies` chooses.

Wiring (gateway/cli/main.py): `add_policy_commands(subparsers, config_parents, deployment_parents)`
once; `policies review` runs `gateway.cli.review.run_review_command`, the others
`gateway.cli.policies.run_policies_command`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import naming
from cedarberg.gateway.authz.entities import EntityType, Resource, parse_path
from cedarberg.gateway.authz.errors import PolicyLoadError, ResourceError
from cedarberg.gateway.authz.naming import GrantSource, ResourceName, StatedGrants
from cedarberg.gateway.authz.review_cli import add_review_command

# The engine (cedarpy), the operations and restrictions (pydantic, pyiceberg), the binding
# findings and the settings are imported by the commands that use them: `add_policy_commands`
# builds part of every `cedarberg` parser, `--help` included (tests/gateway/test_cli_startup.py).
if TYPE_CHECKING:
    from cedarberg.gateway.authz import binding
    from cedarberg.gateway.authz.context import ChangeSummary
    from cedarberg.gateway.authz.engine import Decision, PolicyEngine
    from cedarberg.gateway.authz.operations import Scope

COMMAND = "policies"


def _problem_lines(directory: Path, err: PolicyLoadError) -> list[str]:
    lines = []
    for problem in err.problems:
        path = directory / problem.path if problem.path != str(directory) else directory
        lines.append(
            f"{path}:{problem.line}: {problem.message}" if problem.line else f"{path}: {problem.message}"
        )
    return lines


def load_engine(directory: Path, err: TextIO) -> PolicyEngine | None:
    """The policy set of `directory`, loaded, or None after printing why it is refused."""
    from cedarberg.gateway.authz.engine import PolicyEngine

    engine = PolicyEngine(directory, entity_cache_size=0)
    try:
        engine.load()
    except PolicyLoadError as error:
        for line in _problem_lines(directory, error):
            print(line, file=err)
        print(f"policy set refused: {len(error.problems)} problem(s)", file=err)
        return None
    return engine


def validate(
    directory: Path,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    locations: Mapping[str, str] | None = None,
) -> int:
    """Parse and validate the policy directory; 0 if it would load, else 1 (problems on `err`).
    A valid set's restrictions that cannot bind (`binding_static.static_findings`, on the warehouses
    `locations`) are printed as warnings; they do not fail validation."""
    engine = load_engine(directory, err)
    if engine is None or engine.active is None:
        return 1
    files = len(engine.active.sources) - 1
    print(
        f"{directory}: {len(engine.active.locations)} policies in {files} file(s) valid; "
        f"version {engine.version}",
        file=out,
    )
    from cedarberg.gateway.authz import binding_static

    for finding in binding_static.static_findings(engine, locations):
        print(f"warning: restriction not binding: {finding.message}", file=out)
        print(f"  binds instead: {finding.binds_instead}", file=out)
    return 0


def run_fixture_tests(directory: Path, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the ALLOW/DENY request fixtures; 0 if all pass, 1 if any fails, none exist, or the set is
    refused."""
    from cedarberg.gateway.authz.fixtures import run_fixtures

    engine = load_engine(directory, err)
    if engine is None:
        return 1
    results = run_fixtures(engine, directory)
    for result in results:
        status = "PASS" if result.passed else "FAIL"
        detail = "" if result.passed and result.message == "ok" else f"  ({result.message})"
        print(f"{status} {result.expected:5} {result.path}{detail}", file=out)
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed} passed, {failed} failed", file=out)
    if not results:
        print(f"no fixtures under {directory}/tests/ALLOW or {directory}/tests/DENY", file=err)
        return 1
    return 1 if failed else 0


def _pairs(values: Sequence[str], what: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise ResourceError(f"{what} must look like KEY=VALUE, not {value!r}")
        pairs.append((key, val))
    return pairs


GrantsOver = Callable[[str, StatedGrants | None], GrantSource]
"""The grants to decide with in a warehouse, given those stated with `--property` (None: none)."""


async def resolve_resource(
    action: str, spec: ResourceSpec, owner: str = "", grants_over: GrantsOver | None = None
) -> Resource:
    """The resource `action` decides on, from an entity-id path and `NS:KEY=VALUE` properties
    (`NS` is a dotted namespace of the same warehouse; empty for warehouse properties), built like
    the gateway's (`gateway.authz.naming.build`); `owner` owns an API key named without one. Its
    grants are the stated properties alone, or what `grants_over` makes of them (a deployment's
    registry under them). Raises `ResourceError` for an unknown action or a path or property of the
    wrong shape, and whatever `grants_over` raises."""
    from cedarberg.gateway.authz.operations import OPERATIONS, Scope

    operation = OPERATIONS.get(action)
    if operation is None or operation.action is None:
        raise ResourceError(f"unknown action {action!r}; known: {', '.join(sorted(OPERATIONS))}")
    if operation.scope is Scope.CATALOG:
        return await naming.build(ResourceName(EntityType.CATALOG), StatedGrants())
    if operation.scope is Scope.API_KEY:
        key = ResourceName(EntityType.API_KEY, name=spec.path, owner=spec.key_owner or owner)
        return await naming.build(key, StatedGrants())
    warehouse, levels, _name = parse_path(spec.path)
    name = _shaped(action, operation.scope, spec.path)
    stated = naming.stated_grants(warehouse, levels, spec.properties)
    if grants_over is None:
        return await naming.build(name, stated)
    return await naming.build(name, grants_over(warehouse, stated if spec.properties else None))


def build_resource(action: str, spec: ResourceSpec, owner: str = "") -> Resource:
    """`resolve_resource` with the stated grants alone, outside an event loop."""
    import asyncio

    return asyncio.run(resolve_resource(action, spec, owner))


class GrantsUnavailableError(Exception):
    """The deployment's grants cannot be read (no registry, an outdated one, a store that does
    not answer): `explain` makes no decision rather than one without them."""


class GrantReader(Protocol):
    """Where `explain` takes a resource's grants from, how its output names that, and the
    deployment's warehouse locations (for the binding findings; None: unknown)."""

    @property
    def description(self) -> str: ...

    @property
    def locations(self) -> Mapping[str, str] | None: ...

    async def resource(self, action: str, spec: ResourceSpec, owner: str) -> Resource:
        """The resource, as `resolve_resource` builds it. Raises `ResourceError`, or
        `GrantsUnavailableError` when the grants cannot be read."""
        ...


@dataclass(frozen=True, slots=True)
class StatedGrantReader:
    """The grants stated with `--property`, alone (no deployment is read); `why` says why."""

    why: str = "no deployment read"
    locations: Mapping[str, str] | None = None

    @property
    def description(self) -> str:
        return f"only those stated with --property ({self.why})"

    async def resource(self, action: str, spec: ResourceSpec, owner: str) -> Resource:
        return await resolve_resource(action, spec, owner)


_EXPECTED = {  # by `Scope` value (a StrEnum: its members look these up)
    "warehouse": "WAREHOUSE",
    "container": "WAREHOUSE[/NS]",
    "namespace": "WAREHOUSE/NS",
    "table": "WAREHOUSE/NS/TABLE",
    "view": "WAREHOUSE/NS/VIEW",
}


def _shaped(action: str, scope: Scope, path: str) -> ResourceName:
    """What `path` names, if it has the shape `scope` needs; else `ResourceError`."""
    from cedarberg.gateway.authz.operations import Scope

    warehouse, levels, name = parse_path(path)
    wrong = ResourceError(f"{action} expects {_EXPECTED[scope]}, not {path!r}")
    if scope is Scope.WAREHOUSE or (scope is Scope.CONTAINER and not levels):
        if levels:
            raise wrong
        return ResourceName(EntityType.WAREHOUSE, warehouse)
    if scope in (Scope.NAMESPACE, Scope.CONTAINER):
        if not levels or name is not None:
            raise wrong
        return ResourceName(EntityType.NAMESPACE, warehouse, levels)
    if not levels or name is None:
        raise wrong
    kind = EntityType.TABLE if scope is Scope.TABLE else EntityType.VIEW
    return ResourceName(kind, warehouse, levels, name)


def _print_decision(
    engine: PolicyEngine,
    decision: Decision,
    principal: Principal,
    out: TextIO,
    findings: Sequence[binding.Finding] = (),
) -> None:
    from cedarberg.gateway.authz.restrictions import describe, summary

    verdict = "ALLOW" if decision.allowed else "DENY"
    groups = ", ".join(sorted(principal.groups)) or "none"
    print(f"decision:  {verdict}", file=out)
    print(f"principal: {decision.principal} (groups: {groups})", file=out)
    print(f"action:    {decision.action}", file=out)
    print(f"resource:  {decision.resource}", file=out)
    locations = engine.active.locations if engine.active else {}
    if decision.policy_ids:
        kind = "permitted by" if decision.allowed else "forbidden by"
        print(f"{kind}:", file=out)
        for policy_id in decision.policy_ids:
            print(f"  {policy_id}  ({locations.get(policy_id, '?')})", file=out)
    elif not decision.allowed:
        print("no policy permits this request (default deny)", file=out)
    for rule in describe(engine.scan_rules(decision)):
        print(f"restricted by {rule['policy_id']}: {summary(rule)}", file=out)
    for finding in findings:
        print(f"restriction not binding: {finding.message}", file=out)
        print(f"  binds instead: {finding.binds_instead}", file=out)
    for error in decision.errors:
        print(f"error:     {error}", file=out)
    print(f"policy set version: {decision.version}", file=out)


@dataclass(frozen=True, slots=True)
class PrincipalSpec:
    """Who asks: a namespaced principal id, its groups, kind, authentication method and
    `KEY=VALUE` attributes, as given on the command line."""

    id: str
    groups: Sequence[str] = ()
    kind: str = PrincipalKind.USER.value
    auth_method: str = AuthMethod.API_KEY.value
    attributes: Sequence[str] = ()

    def principal(self) -> Principal:
        """The principal. Raises `ValueError` for an unknown kind or method, `ResourceError` for
        an attribute that is not `KEY=VALUE`."""
        return Principal(
            id=self.id,
            kind=PrincipalKind(self.kind),
            groups=frozenset(self.groups),
            auth_method=AuthMethod(self.auth_method),
            attributes=dict(_pairs(self.attributes, "an attribute")),
        )


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """What is asked about: `WAREHOUSE[/NS.NS[/NAME]]` (an API key id for key actions), the
    `NS:KEY=VALUE` properties of its namespaces, and an API key's owner (default: the principal)."""

    path: str = "default"
    properties: Sequence[str] = ()
    key_owner: str | None = None


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """What the change does (update kinds, refs, property keys, whether it creates the object) and
    where the request comes from."""

    update_kinds: Sequence[str] = ()
    refs: Sequence[str] = ()
    property_keys: Sequence[str] = ()
    creates: bool = False
    client_address: str = "127.0.0.1"

    def changes(self) -> ChangeSummary:
        from cedarberg.gateway.authz.context import ChangeSummary

        return ChangeSummary(
            frozenset(self.update_kinds), frozenset(self.refs), frozenset(self.property_keys), self.creates
        )


@dataclass(frozen=True, slots=True)
class ExplainQuery:
    """One hypothetical request for `cedarberg policies explain`."""

    principal: PrincipalSpec
    action: str
    resource: ResourceSpec = ResourceSpec()
    context: ContextSpec = ContextSpec()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExplainQuery:
        """The query the `policies explain` options (`add_policy_commands`) describe."""
        return cls(
            PrincipalSpec(args.principal, args.group, args.kind, args.auth_method, args.attribute),
            args.action,
            ResourceSpec(args.resource, args.property, args.key_owner),
            ContextSpec(args.update_kind, args.ref, args.property_key, args.creates, args.client_address),
        )


def explain(
    directory: Path,
    query: ExplainQuery,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    grants: GrantReader = StatedGrantReader(),
) -> int:
    """Decide one request with the policies in `directory` and the grants `grants` reads, and
    print why, where the policies and grants came from; 0 allow, 1 deny, 2 error (a refused policy
    set, or input that names no principal or resource: the reason on `err`), 3 the grants cannot be
    read (no decision is made without them). An Allow whose restrictions cannot bind says where and
    why (`binding`; warehouses from `grants.locations`, unknown when None)."""
    import asyncio

    from cedarberg.gateway.authz import binding
    from cedarberg.gateway.authz.context import RequestContext

    engine = load_engine(directory, err)
    if engine is None:
        return 2
    try:
        who = query.principal.principal()
        target = asyncio.run(grants.resource(query.action, query.resource, query.principal.id))
    except (ResourceError, ValueError) as error:
        print(f"cedarberg policies explain: {error}", file=err)
        return 2
    except GrantsUnavailableError as error:
        print(f"cedarberg policies explain: {error}", file=err)
        return 3
    context = RequestContext.of(who, query.context.client_address, query.context.changes())
    decision = engine.decide(who, query.action, target, context)
    findings = binding.Judge(engine, context, grants.locations).decision(decision, who, target)
    _print_decision(engine, decision, who, out, findings)
    _print_sources(directory, grants, out)
    return 0 if decision.allowed else 1


def _print_sources(directory: Path, grants: GrantReader, out: TextIO) -> None:
    print(f"policies:  {directory.resolve()}", file=out)
    print(f"grants:    {grants.description}", file=out)


SETTINGS_HELP = (
    "Settings are read as `cedarberg serve` reads them: the --config file, then CEDARBERG_* "
    "environment variables (e.g. CEDARBERG_AUTHZ__POLICY_DIR), then flags; a bad setting is "
    "serve's message and exit 2. The policies are DIR if given, else the configured "
    "authz.policy_dir (the bundled policies when nothing configures one)."
)
EXPLAIN_HELP = (
    "Grants (namespace properties such as cedarberg.readers) are the deployment's live ones, read "
    "from its registry as the gateway reads them (the store of --data-dir, --store-url or the "
    "settings), with --property values replacing the registry's; without named settings and "
    "without a registry at ./.cedarberg, only --property grants count. --offline decides on the "
    "policies and --property grants alone. The output names the policy directory and where the "
    "grants came from. Exit 0 allow, 1 deny, 2 bad input or settings or a refused policy set, "
    "3 the registry cannot be read (no decision is made without its grants)."
)


def add_policy_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    config_parents: Sequence[argparse.ArgumentParser] = (),
    deployment_parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    """Add `policies validate|test|explain|review` to the `cedarberg` command line;
    `config_parents` adds the options naming the settings (`--config`) to every command,
    `deployment_parents` the options naming the deployment (`--config`, `--data-dir`,
    `--store-url`) to `explain` and `review`, which may read its registry (`gateway.cli.policies`)."""
    policies = subparsers.add_parser(COMMAND, help="validate, test and explain the Cedar policies")
    commands = policies.add_subparsers(dest="policies_command", required=True)
    help_dir = "policy directory (default: the configured authz.policy_dir, else the bundled policies)"
    commands.add_parser(
        "validate",
        parents=list(config_parents),
        help="parse and validate the policies",
        description=f"Parse and validate the policies; exit 1 with FILE:LINE problems. {SETTINGS_HELP}",
    ).add_argument("dir", nargs="?", type=Path, help=help_dir)
    commands.add_parser(
        "test",
        parents=list(config_parents),
        help="run the ALLOW/DENY request fixtures",
        description=f"Run DIR/tests/ALLOW and DIR/tests/DENY; exit 1 if any fails. {SETTINGS_HELP}",
    ).add_argument("dir", nargs="?", type=Path, help=help_dir)
    ex = commands.add_parser(
        "explain",
        parents=list(deployment_parents),
        help="decide one request and show the determining policies",
        description=f"Decide one request and show the determining policies. {SETTINGS_HELP} {EXPLAIN_HELP}",
    )
    ex.add_argument("--dir", type=Path, help=help_dir)
    ex.add_argument(
        "--offline",
        action="store_true",
        help="read no registry: decide on the policies and the --property grants alone",
    )
    ex.add_argument(
        "--principal", required=True, help="namespaced principal id (key:<name>, oidc:<issuer>/<subject>)"
    )
    ex.add_argument("--kind", default="user", choices=[k.value for k in PrincipalKind])
    ex.add_argument("--group", action="append", default=[], help="a group of the principal (repeatable)")
    ex.add_argument("--attribute", action="append", default=[], help="principal attribute KEY=VALUE")
    ex.add_argument("--auth-method", default="api-key", choices=[m.value for m in AuthMethod])
    ex.add_argument("--client-address", default="127.0.0.1")
    ex.add_argument("--action", required=True, help="a Cedar action (an operation id, e.g. loadTable)")
    ex.add_argument(
        "--resource",
        default="default",
        help="WAREHOUSE[/NS.NS[/NAME]] as in entity ids; an API key id for key actions",
    )
    ex.add_argument(
        "--property",
        action="append",
        default=[],
        help="namespace property NS:KEY=VALUE (empty NS: warehouse), e.g. 'sales:cedarberg.readers=bi'",
    )
    ex.add_argument(
        "--update-kind",
        action="append",
        default=[],
        help="what the change does, e.g. add-schema (repeatable)",
    )
    ex.add_argument("--ref", action="append", default=[], help="ref created, moved or removed (repeatable)")
    ex.add_argument("--property-key", action="append", default=[], help="property key set or removed")
    ex.add_argument("--creates", action="store_true", help="the change creates the object")
    ex.add_argument("--key-owner", help="owner of the API key (key actions; default: the principal)")
    add_review_command(commands, help_dir, deployment_parents, SETTINGS_HELP)


def review_offline(
    args: argparse.Namespace, directory: Path, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """`policies review` offline, with the policies of `directory` (`review_cli.run_review`)."""
    from cedarberg.gateway.authz.review_cli import run_review

    engine = load_engine(directory, err)
    return 2 if engine is None else run_review(engine, args, out, err)
