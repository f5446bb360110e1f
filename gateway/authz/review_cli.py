"""`cedarberg policies review`: the access review (`review.py`), with the policies of a directory.

    cedarberg policies review --resource default/sales/orders [--action loadTable] \\
        [--property 'sales:cedarberg.readers=bi'] [--subject 'key:erin=etl,bi'] [--json]
        who may do what on the table: groups, principals, determining policies, restrictions,
        and the conditions (residuals) that decide anyone else
    cedarberg policies review --principal key:erin [--group etl] --resource default/sales \\
        [--table orders] [--view daily] [--json]
        what the principal may do on the namespace and on each of its tables and views

Two forms (`gateway.cli.review` chooses, and documents how):

- with the deployment's settings (`--config`, `--data-dir`, `--store-url`, `CEDARBERG_*`, or the
  default `./.cedarberg` store, as `cedarberg keys list` finds them): the same answer as
  `GET /admin/v1/review`, read through the same functions (`gateway.web.review_sources`): the key
  store's active keys, the anonymous principal, the OIDC issuers (`not_enumerated`), the registry's
  objects, grants and listings, and the configured policy directory (unless `--dir`);
- offline (no settings, or `--offline`): the known principals are only those given with
  `--subject`, the grants only those given with `--property`, a namespace's objects only those
  named with `--table` / `--view`, and the policies those of `--dir` (default: the configured
  `authz.policy_dir`, from `--config` and `CEDARBERG_*` as in the other form; else bundled).

With settings, what is stated adds to the deployment: `--subject` principals are decided besides
the keys'; a `--property` replaces the registry's value of that key on that namespace; `--table` /
`--view` are reviewed besides the registry's. Exit 0; 1 when the deployment cannot be read (no or
outdated registry, an object that does not exist); 2 for bad input or a refused policy set.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import naming
from cedarberg.gateway.authz.entities import EntityType, Resource, child_table, child_view, parse_path
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.naming import ResourceName

# The review and the policy engine (cedarpy, pyiceberg's expressions) are imported where a review
# runs: `add_review_command` builds part of every `cedarberg` parser, `--help` included.
if TYPE_CHECKING:
    from cedarberg.gateway.authz import review
    from cedarberg.gateway.authz.engine import PolicyEngine

_KINDS = {1: EntityType.WAREHOUSE, 2: EntityType.NAMESPACE, 3: EntityType.TABLE}


def add_review_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    help_dir: str,
    parents: Sequence[argparse.ArgumentParser] = (),
    settings_help: str = "",
) -> None:
    """Add `review` to the `policies` sub-commands (`parents`: the deployment's settings options;
    `settings_help`: how the settings are read, for `--help`)."""
    rv = commands.add_parser(
        "review",
        parents=list(parents),
        help="who may do what on a resource, or what a principal may do",
        description="Who may do what on a resource, or what a principal may do. "
        f"{settings_help} With a deployment (settings named, or a registry at ./.cedarberg) the "
        "review reads its registry, API keys and anonymous principal, as GET /admin/v1/review "
        "does; --offline reads no registry: only the principals, grants and objects stated here. "
        "Exit 1 when the deployment cannot be read.",
    )
    rv.add_argument("--dir", type=Path, help=help_dir)
    rv.add_argument(
        "--offline",
        action="store_true",
        help="ignore any deployment: only the principals, grants and objects stated here",
    )
    rv.add_argument("--resource", required=True, help="WAREHOUSE[/NS.NS[/NAME]] as in entity ids")
    rv.add_argument("--is-view", action="store_true", help="WAREHOUSE/NS/NAME names a view, not a table")
    rv.add_argument("--action", action="append", default=[], help="only these actions (repeatable)")
    rv.add_argument(
        "--property",
        action="append",
        default=[],
        help="namespace property NS:KEY=VALUE (empty NS: warehouse), e.g. 'sales:cedarberg.readers=bi'",
    )
    rv.add_argument(
        "--subject",
        action="append",
        default=[],
        help="a known principal ID[=GROUP,GROUP] to decide (repeatable), e.g. 'key:erin=etl'",
    )
    rv.add_argument("--principal", help="review this principal instead: what it may do in --resource")
    rv.add_argument("--kind", default="user", choices=[k.value for k in PrincipalKind])
    rv.add_argument("--group", action="append", default=[], help="a group of --principal (repeatable)")
    rv.add_argument(
        "--table", action="append", default=[], help="a table of the namespace (with --principal)"
    )
    rv.add_argument("--view", action="append", default=[], help="a view of the namespace (with --principal)")
    rv.add_argument("--auth-method", default="api-key", choices=[m.value for m in AuthMethod])
    rv.add_argument("--client-address", default="127.0.0.1")
    rv.add_argument("--json", action="store_true", help="print the review as JSON")


def run_review(engine: PolicyEngine, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run `policies review` offline with a loaded engine; 0, or 2 with the reason on `err`."""
    try:
        context = review_context(args)
        target = _resource(args.resource, args.is_view, args.property)
        if args.principal is not None:
            document = _principal_review(engine, args, target, context)
        else:
            document = _resource_review(engine, args, target, context)
    except (ResourceError, ValueError) as error:
        print(f"cedarberg policies review: {error}", file=err)
        return 2
    emit(document, args, out, "only those stated with --subject (offline)")
    return 0


def review_context(args: argparse.Namespace) -> review.ReviewContext:
    """The context decisions are made with. Raises `ValueError` for an unknown method."""
    from cedarberg.gateway.authz import review

    return review.ReviewContext(AuthMethod(args.auth_method), args.client_address)


def emit(document: Mapping[str, Any], args: argparse.Namespace, out: TextIO, known_from: str) -> None:
    """Print the review: JSON with `--json` (exactly the document), else for people, saying where
    the known principals came from (`known_from`)."""
    if args.json:
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.principal is not None:
        print_principal_review(document, out)
    else:
        print(f"known principals: {known_from}", file=out)
        print_resource_review(document, out)


def _resource(path: str, is_view: bool, properties: list[str]) -> Resource:
    import asyncio

    warehouse, levels, name = parse_path(path)
    kind = _KINDS[1 + len(levels[:1]) + (name is not None)]
    if is_view and kind is EntityType.TABLE:
        kind = EntityType.VIEW
    grants = naming.stated_grants(warehouse, levels, properties)
    return asyncio.run(naming.build(ResourceName(kind, warehouse, levels, name or ""), grants))


def stated_subjects(texts: Sequence[str]) -> list[review.KnownPrincipal]:
    """The `--subject ID[=GROUP,GROUP]` principals. Raises `ResourceError` for an empty id."""
    return [_subject(text) for text in texts]


def _subject(text: str) -> review.KnownPrincipal:
    from cedarberg.gateway.authz import review

    principal_id, _, groups = text.partition("=")
    if not principal_id:
        raise ResourceError(f"a subject must look like ID[=GROUP,GROUP], not {text!r}")
    members = frozenset(g.strip() for g in groups.split(",") if g.strip())
    who = Principal(principal_id, PrincipalKind.USER, members, AuthMethod.API_KEY)
    return review.KnownPrincipal(who, review.SubjectSource.STATED)


def _resource_review(
    engine: PolicyEngine, args: argparse.Namespace, target: Resource, context: review.ReviewContext
) -> dict[str, Any]:
    from cedarberg.gateway.authz import binding, review

    actions = review.chosen_actions(target.kind, args.action)
    groups = review.residual_groups(engine, target, actions)
    audience = review.known_subjects(stated_subjects(args.subject), groups)
    locations = engine.active.locations if engine.active else {}
    reviewed = review.review_resource(engine, target, actions, audience, context)
    document = reviewed.to_json(locations)
    # Offline the warehouses are not known: only unrestricted permits that lift a restriction.
    document["restrictions_not_binding"] = binding.as_json(binding.resource_findings(engine, reviewed, None))
    return document


def _principal_review(
    engine: PolicyEngine, args: argparse.Namespace, target: Resource, context: review.ReviewContext
) -> dict[str, Any]:
    from cedarberg.gateway.authz import binding, review

    if target.kind is not EntityType.NAMESPACE:
        raise ResourceError("--principal reviews a namespace: --resource WAREHOUSE/NS")
    who = Principal(args.principal, PrincipalKind(args.kind), frozenset(args.group), context.auth_method)
    objects = [
        target,
        *(child_table(target, name) for name in args.table),
        *(child_view(target, name) for name in args.view),
    ]
    listing = review.Listing(objects[: review.MAX_OBJECTS], len(objects) > review.MAX_OBJECTS)
    groups_from = "request" if args.group else "none"
    reviewed = review.review_principal(engine, who, listing, context, groups_from=groups_from)
    document = reviewed.to_json()
    document["restrictions_not_binding"] = binding.as_json(binding.principal_findings(engine, reviewed, None))
    return document


# -- text -----------------------------------------------------------------------------------------


def _policies(entry: Mapping[str, Any]) -> str:
    from cedarberg.gateway.authz.restrictions import summary

    text = ", ".join(entry["policy_ids"])
    for rule in entry["restrictions"]:
        text += f"; restricted by {rule['policy_id']}: {summary(rule)}"
    return text


def print_resource_review(document: Mapping[str, Any], out: TextIO) -> None:
    """The resource review for people: per action, who is allowed by which policies, then what
    decides anyone else."""
    ctx = document["context"]
    print(f"resource: {document['resource']}", file=out)
    print(
        f"decided with: auth_method={ctx['auth_method']}, client_address={ctx['client_address']}, no change",
        file=out,
    )
    if document["truncated"]:
        print(f"TRUNCATED: only {document['subjects_decided']} principals and groups decided", file=out)
    for action in document["actions"]:
        print(f"\n{action['action']}:", file=out)
        if action["everyone"]:
            print("  everyone (whoever the principal is)", file=out)
        for group in action["groups"]:
            print(f"  group {group['group']}: {_policies(group)}", file=out)
        for principal in action["principals"]:
            groups = ", ".join(principal["groups"]) or "none"
            print(
                f"  {principal['id']} ({principal['source']}; groups {groups}): {_policies(principal)}",
                file=out,
            )
        if action["members_of_no_group"]:
            print("  principals in no group", file=out)
        if not (
            action["everyone"] or action["groups"] or action["principals"] or action["members_of_no_group"]
        ):
            print("  nobody known", file=out)
        for condition in action["conditions"]:
            where = " (depends on the request's context)" if condition["context_dependent"] else ""
            print(
                f"  {condition['effect']} {condition['policy_id']} ({condition['location']}): "
                f"{condition['condition'] or 'every request'}{where}",
                file=out,
            )
        for error in action["errors"]:
            print(f"  error: {error}", file=out)
    _print_findings(document, out)
    for issuer in document.get("not_enumerated", []):
        print(f"\nnot listed: {issuer['principals']} ({issuer['kind']}): {issuer['reviewed_as']}", file=out)
        bare = [*issuer.get("privileged_groups", []), *issuer.get("bare_groups", [])]
        print(f"  their groups: {issuer.get('groups')}; bare: {', '.join(bare) or 'none'}", file=out)
    print(f"\npolicy set version: {document['version']}", file=out)


def _print_findings(document: Mapping[str, Any], out: TextIO) -> None:
    """The review's restrictions that do not bind (`binding`), one sentence each."""
    for finding in document.get("restrictions_not_binding", []):
        print(f"\nrestriction not binding: {finding['message']}", file=out)
        print(f"  binds instead: {finding['binds_instead']}", file=out)


def print_principal_review(document: Mapping[str, Any], out: TextIO) -> None:
    """The principal review for people: per object, the actions allowed and by which policies."""
    groups = ", ".join(document["groups"]) or "none"
    print(f"principal: {document['principal']} (groups: {groups}, from {document['groups_from']})", file=out)
    if document["truncated"]:
        print(f"TRUNCATED: only the first {len(document['objects'])} objects reviewed", file=out)
    for obj in document["objects"]:
        print(f"\n{obj['type']} {obj['resource']}:", file=out)
        if not obj["actions"]:
            print("  nothing", file=out)
        for action in obj["actions"]:
            print(f"  {action['action']}: {_policies(action)}", file=out)
    _print_findings(document, out)
    print(f"\npolicy set version: {document['version']}", file=out)
