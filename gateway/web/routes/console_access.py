"""The console's Access page ("Who can access this"): the access review of one object, as
`GET /admin/v1/review?resource=...` answers it.

    GET /console/access                                      the form to pick an object
    GET /console/access?warehouse=W[&namespace=NS.NS[&name=N[&type=table|view]]]
                       [&auth_method=...&client_address=...] its review

The route's operation is `reviewAccess` on the catalog, the admin endpoint's own action on what
the endpoint decides it on, so the pipeline lets exactly the endpoint's callers open the page and
audits it as theirs. The answer is built by the endpoint's own functions
(`review_sources.review_context`, `reviewed_target`, `resource_answer`), so the page cannot say
other than the API.

The form's fields name the object: the warehouse, the namespace in the entity-id form of the API's
`resource` (levels joined by `.`, `%2E` for a dot inside a level) and the table or view name as it
is. A field the API would refuse is answered with the form, its problem and the API's status
(400 malformed, 404 no such object): nothing is decided or read for it.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

from aiohttp import web

from cedarberg.catalog.errors import InvalidRequestError, NotFoundError
from cedarberg.gateway.authn.principal import AuthMethod
from cedarberg.gateway.authz.entities import encode_name
from cedarberg.gateway.web import http
from cedarberg.gateway.web.console.access_link import ACCESS, ACTION
from cedarberg.gateway.web.console.access_view import access_view
from cedarberg.gateway.web.console.layout import page
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.review_sources import (
    ReviewSources,
    resource_answer,
    review_context,
    reviewed_target,
)
from cedarberg.gateway.web.route import Route

_MAX_FIELD = 1024  # a namespace path or a name; the API's resource is bounded by the request line
_FIELDS: Final = ("warehouse", "namespace", "name", "type", "auth_method", "client_address")


def _form(request: web.Request) -> dict[str, str]:
    """The form's fields as given (empty when absent). Raises InvalidRequestError for a repeated
    or overlong field."""
    found = {field: http.query_value(request, field, "") for field in _FIELDS}
    long = [field for field, value in found.items() if len(value) > _MAX_FIELD]
    if long:
        raise InvalidRequestError(f"{', '.join(long)} must be at most {_MAX_FIELD} characters")
    return found


def resource_path(form: dict[str, str]) -> str:
    """The API's `resource` (`WAREHOUSE[/NS.NS[/NAME]]`) for the form's warehouse, namespace and
    name. Raises InvalidRequestError for a name without its namespace, or a slash in the
    namespace field (each field names one part of the path)."""
    if form["name"] and not form["namespace"]:
        raise InvalidRequestError("a table or view is named in its namespace: give the namespace")
    if "/" in form["namespace"]:
        # Else "sales/orders" in the namespace field would name a table where a namespace was asked.
        raise InvalidRequestError("a namespace is its levels joined by '.' (%2F for a slash inside a level)")
    name = encode_name(form["name"]) if form["name"] else ""
    return "/".join(part for part in (encode_name(form["warehouse"]), form["namespace"], name) if part)


def _api_query(form: dict[str, str], path: str) -> str:
    """The same review's query string for `GET /admin/v1/review`."""
    query = {"resource": path}
    if form["name"] and form["type"]:
        query["type"] = form["type"]
    for field in ("auth_method", "client_address"):
        if form[field]:
            query[field] = form[field]
    return urlencode(query, safe="/")


async def access(request: web.Request) -> web.Response:
    """The form, and the review of the object it names (the pipeline decided `reviewAccess`)."""
    context: dict[str, Any] = {
        "section": "Access",
        "warehouses": sorted(services(request).ctx.warehouses),
        "auth_methods": [method.value for method in AuthMethod],
        "form": dict.fromkeys(_FIELDS, ""),
        "review": None,
        "problem": None,
        "api_query": None,
    }
    try:
        form = _form(request)
        context["form"] = form
        if not form["warehouse"]:
            return page(request, "access.html", context)
        path = resource_path(form)
        decided_with = review_context(form["auth_method"] or None, form["client_address"] or None)
        svc, sec = services(request), security(request)
        target = await reviewed_target(svc, path, form["type"] if form["name"] and form["type"] else None)
        document = await resource_answer(ReviewSources.running(svc, sec), target, [], decided_with)
    except InvalidRequestError as err:
        return page(request, "access.html", {**context, "problem": str(err)}, status=400)
    except NotFoundError as err:
        return page(request, "access.html", {**context, "problem": str(err)}, status=404)
    context["review"] = access_view(document, security(request).policies)
    context["api_query"] = _api_query(form, path)
    return page(request, "access.html", context)


ROUTES = [Route("GET", ACCESS, access, ACTION, advertised=False, session=True)]
