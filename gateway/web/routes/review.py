"""`GET /admin/v1/review`: the access review (`gateway.authz.review`) with the catalog's grants,
the API key store's principals and the configured anonymous principal. Cedar decides the
operation `reviewAccess` on the catalog before the handler runs (admins, with the default policies).

    GET /admin/v1/review?resource=default/sales/orders[&type=view][&action=loadTable ...]
        who may do what on the table (or view, namespace `default/sales`, warehouse `default`)
    GET /admin/v1/review?principal=key:erin[&group=etl ...]&resource=default/sales
        what the principal may do on the namespace and on each table and view in it

`resource` is the entity-id path (`WAREHOUSE[/NS.NS[/NAME]]`, `%2E` for a dot inside a name, so
`%252E` in a query string). Optional: `auth_method` and `client_address`, the context decisions
are made with (default `api-key`, `127.0.0.1`). An object that does not exist is a 404
(NoSuchWarehouseException, NoSuchNamespaceException, NoSuchTableException, NoSuchViewException);
a malformed query a 400. Work is bounded: `review.MAX_SUBJECTS` principals and groups,
`review.MAX_OBJECTS` tables and views; beyond them the answer says `truncated`.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from cedarberg.catalog.errors import (
    InvalidRequestError,
    NoSuchTableError,
    NoSuchViewError,
    NoSuchWarehouseError,
)
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.objects import TABLE, VIEW
from cedarberg.gateway.authn.key_store import ApiKeyRecord
from cedarberg.gateway.authn.principal import KEY_NAMESPACE, AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import naming, review
from cedarberg.gateway.authz.entities import EntityType, Resource, parse_path
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.naming import ResourceName
from cedarberg.gateway.web import resources
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.route import Route

PATH = "/admin/v1/review"
_KEY_PAGE = 1000
_MAX_QUERY_VALUES = 64  # actions or groups in one query


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _values(request: web.Request, name: str) -> list[str]:
    values = request.query.getall(name, [])
    if len(values) > _MAX_QUERY_VALUES or any(not 1 <= len(v) <= 256 for v in values):
        raise InvalidRequestError(f"at most {_MAX_QUERY_VALUES} '{name}' values of 1-256 characters")
    return values


def _context(request: web.Request) -> review.ReviewContext:
    try:
        method = AuthMethod(request.query.get("auth_method", AuthMethod.API_KEY.value))
    except ValueError:
        raise InvalidRequestError(
            f"auth_method must be one of {', '.join(m.value for m in AuthMethod)}"
        ) from None
    address = request.query.get("client_address", "127.0.0.1")
    if not 1 <= len(address) <= 64:
        raise InvalidRequestError("client_address must be 1-64 characters")
    return review.ReviewContext(method, address)


async def _resource(request: web.Request) -> Resource:
    """The object `resource` (and `type`) names, with the registry's grants. Raises
    InvalidRequestError, or the catalog's NoSuch* error when it does not exist."""
    path = request.query.get("resource")
    if not path:
        raise InvalidRequestError("resource is required (WAREHOUSE[/NS.NS[/NAME]])")
    kind_wanted = request.query.get("type")
    if kind_wanted not in (None, "table", "view"):
        raise InvalidRequestError("type must be table or view")
    try:
        warehouse, levels, name = parse_path(path)
    except ResourceError as err:
        raise InvalidRequestError(str(err)) from None
    svc = services(request)
    if warehouse not in svc.ctx.warehouses:
        raise NoSuchWarehouseError(f"warehouse does not exist: {warehouse}")
    grants = resources.RegistryGrants(svc, fresh=False)
    if not levels:
        return await naming.build(ResourceName(EntityType.WAREHOUSE, warehouse), grants)
    namespace = Namespace.of(list(levels))
    await svc.namespaces.exists(warehouse, namespace)  # NoSuchNamespaceError
    if name is None:
        return await naming.build(ResourceName(EntityType.NAMESPACE, warehouse, levels), grants)
    identifier = Identifier.of(namespace, name)
    kind = await _object_kind(request, warehouse, identifier, kind_wanted)
    return await naming.build(ResourceName(kind, warehouse, levels, name), grants)


async def _object_kind(
    request: web.Request, warehouse: str, identifier: Identifier, wanted: str | None
) -> EntityType:
    svc = services(request)
    if wanted != "view":
        try:
            await svc.tables.exists(warehouse, identifier)
        except NoSuchTableError:
            if wanted == "table":
                raise
        else:
            return EntityType.TABLE
    try:
        await svc.views.exists(warehouse, identifier)
    except NoSuchViewError:
        if wanted == "view":
            raise
        raise NoSuchTableError(f"Table or view does not exist: {identifier}") from None
    return EntityType.VIEW


async def _active_keys(request: web.Request, principal: str | None = None) -> tuple[list[ApiKeyRecord], bool]:
    """The active API keys (of `principal`, a key principal's name, if given), at most
    `review.MAX_SUBJECTS`, and whether there were more."""
    keys = security(request).api_keys
    now = datetime.now(UTC)
    found: list[ApiKeyRecord] = []
    after: str | None = None
    while True:
        page = await keys.list_keys(principal=principal, after=after, limit=_KEY_PAGE)
        found.extend(record for record in page if record.is_active(now))
        if len(found) > review.MAX_SUBJECTS:
            return found[: review.MAX_SUBJECTS], True
        if len(page) < _KEY_PAGE:
            return found, False
        after = page[-1].key_id


def _key_principal(record: ApiKeyRecord) -> Principal:
    return Principal(record.principal_id, record.kind, frozenset(record.groups), AuthMethod.API_KEY)


def _not_enumerated(request: web.Request) -> list[dict[str, Any]]:
    """The principals the gateway cannot list: every subject of each configured OIDC issuer."""
    return [
        {
            "principals": f"oidc:{issuer.namespace}/{issuer.principal_prefix}*",
            "kind": issuer.principal_kind.value,
            "groups_claim": issuer.groups_claim,
            "reviewed_as": "the groups their tokens carry (group members), and the conditions",
        }
        for issuer in services(request).settings.oidc.issuers
    ]


async def _resource_review(
    request: web.Request, target: Resource, context: review.ReviewContext
) -> dict[str, Any]:
    engine = security(request).policies
    try:
        actions = review.chosen_actions(target.kind, _values(request, "action"))
    except ResourceError as err:
        raise InvalidRequestError(str(err)) from None
    records, keys_truncated = await _active_keys(request)
    known = [review.KnownPrincipal(_key_principal(r), review.SubjectSource.API_KEY) for r in records]
    anonymous = security(request).anonymous
    if anonymous is not None:
        known.append(review.KnownPrincipal(anonymous, review.SubjectSource.ANONYMOUS))
    audience = review.known_subjects(known, review.residual_groups(engine, target, actions))
    if keys_truncated:
        audience = review.Audience(audience.subjects, truncated=True)
    locations = engine.active.locations if engine.active is not None else {}
    # Thousands of decisions: made off the event loop (the engine is thread-safe).
    reviewed = await asyncio.to_thread(review.review_resource, engine, target, actions, audience, context)
    document = reviewed.to_json(locations)
    document["not_enumerated"] = _not_enumerated(request)
    return document


async def _reviewed_principal(
    request: web.Request, principal_id: str, context: review.ReviewContext
) -> tuple[Principal, str]:
    """The principal to review and where its groups come from: the query's `group`s, else its
    active API keys' (a `key:` principal whose keys agree), else none."""
    groups = _values(request, "group")
    try:
        kind = PrincipalKind(request.query.get("kind", PrincipalKind.USER.value))
    except ValueError:
        raise InvalidRequestError("kind must be user, service or anonymous") from None
    if groups or not principal_id.startswith(KEY_NAMESPACE):
        source = "request" if groups else "none"
        return Principal(principal_id, kind, frozenset(groups), context.auth_method), source
    records, _ = await _active_keys(request, principal_id.removeprefix(KEY_NAMESPACE))
    shapes = {(r.kind, frozenset(r.groups)) for r in records}
    if len(shapes) > 1:
        raise InvalidRequestError(
            f"the active keys of {principal_id} differ in kind or groups; name the groups with 'group'"
        )
    if not shapes:
        return Principal(principal_id, kind, frozenset(), context.auth_method), "none"
    key_kind, key_groups = shapes.pop()
    return Principal(principal_id, key_kind, key_groups, context.auth_method), "api-key"


async def _listing(request: web.Request, namespace: Resource) -> review.Listing:
    """The namespace and its tables and views (at most `review.MAX_OBJECTS` of them)."""
    svc = services(request)
    warehouse = namespace.warehouse or ""
    key = Namespace.of(list(namespace.namespace)).key
    objects = [namespace]
    truncated = False
    async with svc.ctx.store.read() as tx:
        for kind, view in ((TABLE, False), (VIEW, True)):
            room = review.MAX_OBJECTS - (len(objects) - 1)
            names = await tx.list_objects(warehouse, key, kind, None, room + 1)
            truncated = truncated or len(names) > room
            objects.extend(svc.resources.child(namespace, name, view) for name in names[:room])
    return review.Listing(objects, truncated)


async def review_access(request: web.Request) -> web.Response:
    """The access review of a resource, or of a principal in a namespace."""
    context = _context(request)
    target = await _resource(request)
    principal_id = request.query.get("principal")
    if principal_id is None:
        return _json(await _resource_review(request, target, context))
    if not 1 <= len(principal_id) <= 256:
        raise InvalidRequestError("principal must be 1-256 characters")
    if target.kind is not EntityType.NAMESPACE:
        raise InvalidRequestError("a principal is reviewed in a namespace: resource=WAREHOUSE/NS")
    who, groups_from = await _reviewed_principal(request, principal_id, context)
    listing = await _listing(request, target)
    engine = security(request).policies
    reviewed = await asyncio.to_thread(
        lambda: review.review_principal(engine, who, listing, context, groups_from=groups_from)
    )
    return _json(reviewed.to_json())


ROUTES = [Route("GET", PATH, review_access, "reviewAccess", advertised=False)]
