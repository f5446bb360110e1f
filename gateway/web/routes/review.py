"""`GET /admin/v1/review`: the access review (`gateway.authz.review`) with the catalog's grants,
the API key store's principals, the configured anonymous principal and OIDC issuers, as
`gateway.web.review_sources` reads them (so does `cedarberg policies review` with settings). Cedar decides the
operation `reviewAccess` on the catalog before the handler runs (admins, with the default policies).

    GET /admin/v1/review?resource=default/sales/orders[&type=view][&action=loadTable ...]
        who may do what on the table (or view, namespace `default/sales`, warehouse `default`)
    GET /admin/v1/review?principal=key:erin[&group=etl ...]&resource=default/sales
        what the principal may do on the namespace and on each table and view in it

Both answers carry `restrictions_not_binding`: where a column/row restriction does not bind the
principals found allowed to read (`gateway.authz.binding`: lifted by an unrestricted permit on the
registry's grants, a local warehouse, a client trusted with `readRestrictedData`).

`resource` is the entity-id path (`WAREHOUSE[/NS.NS[/NAME]]`, `%2E` for a dot inside a name, so
`%252E` in a query string). Optional: `auth_method` and `client_address`, the context decisions
are made with (default `api-key`, `127.0.0.1`). An object that does not exist is a 404
(NoSuchWarehouseException, NoSuchNamespaceException, NoSuchTableException, NoSuchViewException);
a malformed query a 400. Work is bounded: `review.MAX_SUBJECTS` principals and groups,
`review.MAX_OBJECTS` tables and views; beyond them the answer says `truncated`.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
from aiohttp import web

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.authn.principal import PrincipalKind
from cedarberg.gateway.authz.entities import EntityType
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.review_sources import (
    ReviewSources,
    listing,
    principal_review,
    resource_answer,
    review_context,
    reviewed_principal,
    reviewed_target,
)
from cedarberg.gateway.web.route import Route

PATH = "/admin/v1/review"
_MAX_QUERY_VALUES = 64  # actions or groups in one query


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _values(request: web.Request, name: str) -> list[str]:
    values = request.query.getall(name, [])
    if len(values) > _MAX_QUERY_VALUES or any(not 1 <= len(v) <= 256 for v in values):
        raise InvalidRequestError(f"at most {_MAX_QUERY_VALUES} '{name}' values of 1-256 characters")
    return values


def _sources(request: web.Request) -> ReviewSources:
    """The running gateway, as the review reads it (`review_sources`)."""
    return ReviewSources.running(services(request), security(request))


async def review_access(request: web.Request) -> web.Response:
    """The access review of a resource, or of a principal in a namespace."""
    query = functools.partial(http.query_value, request)
    context = review_context(query("auth_method"), query("client_address"))
    target = await reviewed_target(services(request), query("resource"), query("type"))
    principal_id = http.query_value(request, "principal")
    if principal_id is None:
        return _json(await resource_answer(_sources(request), target, _values(request, "action"), context))
    sources = _sources(request)
    try:
        if not 1 <= len(principal_id) <= 256:
            raise InvalidRequestError("principal must be 1-256 characters")
        if target.kind is not EntityType.NAMESPACE:
            raise InvalidRequestError("a principal is reviewed in a namespace: resource=WAREHOUSE/NS")
        kind = _kind(request)
        who, groups_from = await reviewed_principal(
            sources, principal_id, kind, _values(request, "group"), context
        )
    except ResourceError as err:
        raise InvalidRequestError(str(err)) from None
    objects = await listing(sources.services, target)
    return _json(await principal_review(sources, who, groups_from, objects, context))


def _kind(request: web.Request) -> PrincipalKind:
    try:
        return PrincipalKind(http.query_value(request, "kind", PrincipalKind.USER.value))
    except ValueError:
        raise InvalidRequestError("kind must be user, service or anonymous") from None


ROUTES = [Route("GET", PATH, review_access, "reviewAccess", advertised=False)]
