"""`cedarberg admin explain|review`: ask a running gateway why it decides as it does, with its
live policies and live grants (`POST /admin/v1/explain`, `GET /admin/v1/review`).

    explain --principal ID [--kind user|service|anonymous] [--group G ...] --action ACTION
            [--resource WAREHOUSE[/NS.NS[/NAME]] [--view] | --api-key KEY_ID]
        the decision, the policies that made it (file:line), and the restrictions an Allow carries;
        grants come from the gateway's catalog
    review --resource WAREHOUSE[/NS.NS[/NAME]] [--view] [--action A ...]
        who may do what on the resource
    review --resource WAREHOUSE/NS --principal ID [--kind K] [--group G ...]
        what the principal may do in the namespace

Resource paths are the entity-id form (`%2E` for a dot inside a name). `--json` prints the
gateway's answer as it is.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

import orjson

from cedarberg.gateway.authz.entities import parse_path
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.cli.admin_client import AdminClient, AdminSetupError


def add_admin_decision_commands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    explain = subparsers.add_parser(
        "explain", parents=[common], help="explain a decision with the gateway's live policies and grants"
    )
    _principal_options(explain, required=True)
    explain.add_argument("--action", required=True, help="Cedar action, e.g. loadTable, createTable")
    target = explain.add_mutually_exclusive_group()
    target.add_argument("--resource", help="WAREHOUSE[/NS.NS[/NAME]] (default: the catalog)")
    target.add_argument("--api-key", metavar="KEY_ID", help="an API key (for the key actions)")
    explain.add_argument("--view", action="store_true", help="the NAME in --resource is a view")
    review = subparsers.add_parser("review", parents=[common], help="review who may do what (live)")
    review.add_argument("--resource", required=True, help="WAREHOUSE[/NS.NS[/NAME]]")
    review.add_argument("--view", action="store_true", help="the NAME in --resource is a view")
    review.add_argument("--action", action="append", default=[], help="only these actions (repeatable)")
    _principal_options(review, required=False)


def _principal_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--principal", required=required, help="principal id, e.g. key:bea")
    parser.add_argument("--kind", choices=["user", "service", "anonymous"], default="user")
    parser.add_argument("--group", action="append", default=[], help="a group of the principal (repeatable)")


def _explain_resource(args: argparse.Namespace) -> dict[str, Any]:
    if args.api_key is not None:
        return {"type": "api-key", "id": args.api_key}
    if args.resource is None:
        return {"type": "catalog"}
    try:
        warehouse, levels, name = parse_path(args.resource)
    except ResourceError as err:
        raise AdminSetupError(str(err)) from None
    if not levels:
        return {"type": "warehouse", "warehouse": warehouse}
    resource: dict[str, Any] = {"type": "namespace", "warehouse": warehouse, "namespace": list(levels)}
    if name is not None:
        resource.update(type="view" if args.view else "table", name=name)
    return resource


def run_admin_explain(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    """Raises AdminError, AdminSetupError."""
    body = {
        "principal": args.principal,
        "kind": args.kind,
        "groups": args.group,
        "action": args.action,
        "resource": _explain_resource(args),
    }
    answer = client.call("POST", "/admin/v1/explain", body)
    if args.json:
        out.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(
        f"{answer['decision'].upper()} {answer['action']} on {answer['resource']} for {answer['principal']}",
        file=out,
    )
    for policy in answer["policies"]:
        print(f"  determined by: {policy['id']} ({policy['location'] or 'unknown location'})", file=out)
    if not answer["policies"]:
        print("  no policy permits it (default deny)", file=out)
    restrictions = answer.get("restrictions") or []
    if restrictions:
        from cedarberg.gateway.authz.restrictions import summary

        for rule in restrictions:
            print(f"  restricted by {rule['policy_id']}: {summary(rule)}", file=out)
    for error in answer["errors"]:
        print(f"  error: {error}", file=out)
    print(f"grants from: {answer['grants_from']}; policy set version: {answer['version']}", file=out)
    return 0


def run_admin_review(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    """Raises AdminError."""
    query = [("resource", args.resource)]
    if args.view:
        query.append(("type", "view"))
    query += [("action", action) for action in args.action]
    if args.principal is not None:
        query += [("principal", args.principal), ("kind", args.kind)]
        query += [("group", group) for group in args.group]
    answer = client.call("GET", "/admin/v1/review", query=query)
    if args.json:
        out.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    # The printers of `policies review` (they import the policy engine: only when printing).
    from cedarberg.gateway.authz.review_cli import (
        print_principal_review,
        print_resource_review,
    )

    if args.principal is not None:
        print_principal_review(answer, out)
    else:
        print("known principals: the gateway's (active API keys, anonymous principal)", file=out)
        print_resource_review(answer, out)
    return 0
