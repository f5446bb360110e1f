"""The console's Explain page: a decision of the active policies and why, as the admin API's
`POST /admin/v1/explain` answers it.

    GET /console/explain             the form                                  (explainDecision)
    GET /console/explain?FIELDS      the form, filled in, and the answer under it

The page is the operation `explainDecision` for the pipeline, so it is allowed exactly to whom the
endpoint is, and audited as the signed-in principal's. The answer is computed by the endpoint's
own function (`routes.admin.explanation`), so page and API cannot disagree; explaining reads only
(nothing is written), which is why it is a GET and an address can be shared.

FIELDS, the explain body's fields (the same names `GET /admin/v1/audit` attaches to a decision
record, so an audit line links here): `principal`, `kind`, `auth_method`, `client_address`,
`groups` (comma-separated), `action`, and the resource either as `resource`, a Cedar uid exactly
as audit records write it (`Cedarberg::Table::"default/sales/orders"`), or as `type`,
`warehouse`, `namespace` (levels joined by dots) and `name`. Giving both is refused: neither
silently wins. Bad input (an unknown action, a malformed uid, a field too long, a repeated one)
answers the form with a message naming what was expected, status 400; an unknown warehouse or
API key, 404.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from cedarberg.catalog.errors import InvalidRequestError, NotFoundError
from cedarberg.gateway.audit_explain import explained_resource
from cedarberg.gateway.authn.principal import AuthMethod, PrincipalKind
from cedarberg.gateway.authz.operations import OPERATIONS
from cedarberg.gateway.authz.restrictions import summary
from cedarberg.gateway.web import errors, http
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.console.policy_source import policy_source
from cedarberg.gateway.web.keys import security
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.admin import explanation
from cedarberg.gateway.web.routes.admin_requests import ExplainRequest

EXPLAIN: Final = "/console/explain"
# The explain body's fields, as an audit line's link names them.
REQUEST_FIELDS: Final = ("principal", "kind", "auth_method", "client_address", "groups", "action", "resource")
# The resource described by its parts instead of its uid.
PART_FIELDS: Final = ("type", "warehouse", "namespace", "name")
# A bound on what is read of one field before the explain request's own validation says what is
# wrong with it (names are at most 256 characters; a request line is at most 8 KiB anyway).
MAX_FIELD_CHARS: Final = 4096
CEDAR_ACTIONS: Final = tuple(sorted(op for op, spec in OPERATIONS.items() if spec.action is not None))
RESOURCE_TYPES: Final = ("catalog", "warehouse", "namespace", "table", "view", "api-key")
UID_EXAMPLE: Final = 'Cedarberg::Table::"default/sales/orders"'


def _fields(request: web.Request) -> dict[str, str]:
    """The form's fields that are given (non-empty). Raises InvalidRequestError for a repeated
    or over-long one."""
    given: dict[str, str] = {}
    for name in (*REQUEST_FIELDS, *PART_FIELDS):
        value = http.query_value(request, name)
        if value is None or not value.strip():
            continue
        if len(value) > MAX_FIELD_CHARS:
            raise InvalidRequestError(f"{name}: expected at most {MAX_FIELD_CHARS} characters")
        given[name] = value.strip()
    return given


def _refill(request: web.Request) -> dict[str, str]:
    """The fields to fill the form in with again after a problem: each given once and within
    bounds (never raises)."""
    shown: dict[str, str] = {}
    for name in (*REQUEST_FIELDS, *PART_FIELDS):
        values = request.query.getall(name, ())
        if len(values) == 1 and len(values[0]) <= MAX_FIELD_CHARS:
            shown[name] = values[0].strip()
    return shown


def _resource(given: dict[str, str]) -> dict[str, Any]:
    """The explain body's resource, from the uid or from the parts. Raises InvalidRequestError."""
    parts = [name for name in PART_FIELDS if name in given]
    if "resource" in given and parts:
        raise InvalidRequestError(
            "give the resource either as a Cedar uid or as type, warehouse, namespace and name, not both "
            f"(both given: resource and {', '.join(parts)})"
        )
    if "resource" in given:
        from_uid = explained_resource(given["resource"])
        if from_uid is None:
            raise InvalidRequestError(
                f"resource: expected a Cedar uid as audit records write it, e.g. {UID_EXAMPLE}"
            )
        return from_uid
    kind = given.get("type")
    if kind is None:
        raise InvalidRequestError(f"resource: give a Cedar uid (e.g. {UID_EXAMPLE}) or a type")
    if kind not in RESOURCE_TYPES:
        raise InvalidRequestError(f"type: expected one of {', '.join(RESOURCE_TYPES)}")
    if kind == "api-key":
        return {"type": kind, "id": given.get("name", "")}
    described: dict[str, Any] = {"type": kind}
    if "warehouse" in given:
        described["warehouse"] = given["warehouse"]
    if "namespace" in given:
        described["namespace"] = given["namespace"].split(".")
    if "name" in given:
        described["name"] = given["name"]
    return described


def explain_request(given: dict[str, str]) -> ExplainRequest:
    """The explain request the form's fields describe. Raises InvalidRequestError naming the
    field and what was expected there."""
    action = given.get("action")
    if action is None:
        raise InvalidRequestError("action: give one of the Cedar actions, e.g. loadTable")
    if action not in CEDAR_ACTIONS:
        raise InvalidRequestError(
            f"action: expected one of the Cedar actions (e.g. loadTable), not {action!r}"
        )
    body: dict[str, Any] = {
        key: given[key] for key in ("principal", "kind", "auth_method", "client_address") if key in given
    }
    groups = [group.strip() for group in given.get("groups", "").split(",") if group.strip()]
    body.update(action=action, groups=groups, resource=_resource(given))
    return http.validate(ExplainRequest, body)


def _policies(answer: dict[str, Any], request: web.Request) -> list[dict[str, Any]]:
    """The determining policies with their lines, from the set that decided (none shown if the
    set changed since: its lines could be another policy's)."""
    active = security(request).policies.active
    sources = active.sources if active is not None and active.version == answer["version"] else {}
    return [
        {"source": policy_source(p["id"], p["location"], sources), "location": p["location"]}
        for p in answer["policies"]
    ]


def _shown(answer: dict[str, Any], request: web.Request) -> dict[str, Any]:
    return {
        **answer,
        "determining": _policies(answer, request),
        "restriction_rows": [{**r, "summary": summary(r)} for r in answer["restrictions"]],
    }


async def explain(request: web.Request) -> web.Response:
    """The form, and under it the explanation of the request its fields describe (if any)."""
    context: dict[str, Any] = {
        "section": "Explain",
        "actions": CEDAR_ACTIONS,
        "kinds": [kind.value for kind in PrincipalKind],
        "methods": [method.value for method in AuthMethod],
        "types": RESOURCE_TYPES,
        "example": UID_EXAMPLE,
        "form": {},
        "problem": None,
        "answer": None,
    }
    status = 200
    try:
        given = _fields(request)
        context["form"] = given
        if given:
            context["answer"] = _shown(await explanation(request, explain_request(given)), request)
    except (InvalidRequestError, NotFoundError) as err:
        context["form"] = _refill(request)
        mapping = errors.lookup(err)
        status = mapping.status if mapping is not None else 400
        context["problem"] = (mapping.message if mapping is not None else None) or str(err)
    return page(request, "explain.html", context, status)


ROUTES = [Route("GET", EXPLAIN, explain, "explainDecision", advertised=False, session=True)]
