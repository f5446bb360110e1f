"""The admin API under `/admin/v1/`: API keys, the active policy set, and decision explanations.

Authentication and Cedar run before these handlers (operations `createApiKey` ... `explainDecision`
in `gateway.authz.operations`), so the handlers only do the work.

    POST   /admin/v1/api-keys                 createApiKey   201 record + "key" (shown once)
    GET    /admin/v1/api-keys                 listApiKeys    {"api-keys": [...], "next-page-token"}
    GET    /admin/v1/api-keys/{key_id}        getApiKey      record
    POST   /admin/v1/api-keys/{key_id}/rotate rotateApiKey   record + new "key"; optional body
                                                             {"overlap_seconds": N}: the old secret
                                                             keeps working N seconds (default 0)
    DELETE /admin/v1/api-keys/{key_id}        revokeApiKey   record (idempotent)
    GET    /admin/v1/policies                 showPolicies   version, files, policies, refusal
    POST   /admin/v1/explain                  explainDecision decision, determining policies, restrictions
                                                             and where they cannot bind (authz.binding)
    GET    /admin/v1/review                   reviewAccess   the access review (routes/review.py)

Key records carry `summary`, whom the key is for in words (`a service key for etl`, `a personal
key for dana`), and `previous_secret_expires_at`, the end of a rotation's overlap window (null when
the old secret stopped at once).

Promises:
- no response except create and rotate carries key material, and those two carry
  `Cache-Control: no-store`; records never hold the secret or its hash;
- bodies are JSON objects of at most `MAX_BODY_BYTES`, validated strictly (no coercion, no unknown
  fields); errors raise `catalog.errors` classes, which the gateway maps to ErrorModel responses:
  InvalidRequestError 400, NotFoundError 404 (unknown key), ConflictError 409 (rotating a revoked
  key), StorageUnavailableError 503.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from cedarberg.catalog.errors import (
    ConflictError,
    InvalidRequestError,
    NoSuchWarehouseError,
    NotFoundError,
)
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.gateway.authn.api_keys import (
    MAX_NAME_LENGTH,
    ApiKeyRevokedError,
    InvalidApiKeyRequestError,
    NoSuchApiKeyError,
)
from cedarberg.gateway.authn.key_format import is_key_id
from cedarberg.gateway.authn.key_record import ApiKeyRecord
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz import binding, naming
from cedarberg.gateway.authz.context import ChangeSummary, RequestContext
from cedarberg.gateway.authz.entities import EntityType, Resource
from cedarberg.gateway.authz.grant_chain import grant_chain
from cedarberg.gateway.authz.naming import GrantSource, ResourceName, StatedGrants
from cedarberg.gateway.authz.operations import OPERATIONS, Scope
from cedarberg.gateway.authz.restrictions import describe
from cedarberg.gateway.web import http, resources
from cedarberg.gateway.web.keys import AUDIT_DETAIL, security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.admin_requests import (
    MAX_BODY_BYTES,
    MAX_PAGE_SIZE,
    CreateKeyRequest,
    ExplainRequest,
    ExplainResource,
    RotateKeyRequest,
)

ADMIN = "/admin/v1"
API_KEYS = f"{ADMIN}/api-keys"
API_KEY = f"{API_KEYS}/{{key_id}}"
DEFAULT_PAGE_SIZE = 100
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


# -- API keys -------------------------------------------------------------------------------------


@contextmanager
def _key_errors() -> Iterator[None]:
    try:
        yield
    except NoSuchApiKeyError as err:
        raise NotFoundError(f"API key does not exist: {err}") from None
    except ApiKeyRevokedError as err:
        raise ConflictError(f"API key is revoked: {err}") from None
    except InvalidApiKeyRequestError as err:
        raise InvalidRequestError(str(err)) from None


def _key_id(request: web.Request) -> str:
    key_id = request.match_info["key_id"]
    if not is_key_id(key_id):
        raise NotFoundError("API key does not exist")  # not even a key id: no lookup
    return key_id


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


def _with_key(record: ApiKeyRecord, plaintext: str) -> dict[str, Any]:
    return {**record.to_json(), "key": plaintext}


def _expiry(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        expires_at = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequestError("expires_at must be an ISO 8601 date-time") from None
    if expires_at.tzinfo is None:
        raise InvalidRequestError("expires_at must carry a time zone (e.g. 'Z' or '+00:00')")
    return expires_at


async def create_key(request: web.Request, body: CreateKeyRequest) -> tuple[ApiKeyRecord, str]:
    """Create the key `body` describes (createApiKey, decided already) and name it in the
    mutation's audit record; returns its record and the plaintext key, to be shown once. Raises
    InvalidRequestError (a bad owner, group, expiry or description), StorageUnavailableError.
    (The admin API and the console's Keys page both create keys here.)"""
    with _key_errors():
        record, plaintext = await security(request).api_keys.create_key(
            body.principal,
            PrincipalKind(body.kind),
            body.groups,
            _expiry(body.expires_at),
            body.description,
        )
    # The decision was on the catalog (the key did not exist yet): the outcome names the key.
    request[AUDIT_DETAIL] = {"key_id": record.key_id, "key_principal": record.principal_id}
    return record, plaintext


async def create_api_key(request: web.Request) -> web.Response:
    body = http.validate(CreateKeyRequest, await http.json_object(request, MAX_BODY_BYTES))
    record, plaintext = await create_key(request, body)
    headers = {**_NO_STORE, "Location": f"{API_KEYS}/{record.key_id}"}
    return _json(_with_key(record, plaintext), status=201, headers=headers)


def _page_size(request: web.Request) -> int:
    raw = http.query_value(request, "pageSize")
    if raw is None:
        return DEFAULT_PAGE_SIZE
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise InvalidRequestError(f"pageSize must be an integer from 1 to {MAX_PAGE_SIZE}")
    return int(raw)


async def list_api_keys(request: web.Request) -> web.Response:
    principal = http.query_value(request, "principal")
    if principal is not None and not 1 <= len(principal) <= MAX_NAME_LENGTH:
        raise InvalidRequestError(f"principal must be 1-{MAX_NAME_LENGTH} characters")
    after = http.query_value(request, "pageToken") or None
    if after is not None and not is_key_id(after):
        raise InvalidRequestError("invalid pageToken")
    page, next_token = await key_page(request, principal, after, _page_size(request))
    return _json({"api-keys": [r.to_json() for r in page], "next-page-token": next_token})


async def key_page(
    request: web.Request, principal: str | None, after: str | None, size: int
) -> tuple[list[ApiKeyRecord], str | None]:
    """One page of key records (listApiKeys, decided already) in id order after the key id
    `after`, of `principal` only if given, and the token of the next page (None on the last).
    Raises StorageUnavailableError. (The admin API and the console's Keys page list keys here.)"""
    # One more than a page tells whether another page follows.
    records = await security(request).api_keys.list_keys(principal=principal, after=after, limit=size + 1)
    page = records[:size]
    return page, page[-1].key_id if len(records) > size else None


async def get_api_key(request: web.Request) -> web.Response:
    key_id = _key_id(request)
    with _key_errors():
        record = await security(request).api_keys.get_key(key_id)
    return _json(record.to_json())


async def rotate_api_key(request: web.Request) -> web.Response:
    key_id = _key_id(request)
    document = await http.json_object(request, MAX_BODY_BYTES) if request.body_exists else {}
    body = http.validate(RotateKeyRequest, document)
    with _key_errors():
        record, plaintext = await security(request).api_keys.rotate_key(key_id, body.overlap_seconds)
    return _json(_with_key(record, plaintext), headers=_NO_STORE)


async def revoke_api_key(request: web.Request) -> web.Response:
    key_id = _key_id(request)
    with _key_errors():
        record = await security(request).api_keys.revoke_key(key_id)
    return _json(record.to_json())


# -- policies -------------------------------------------------------------------------------------


async def show_policies(request: web.Request) -> web.Response:
    """The active set (version, files with their text, policy locations) and the last refusal."""
    status = security(request).policies.status()
    sources: dict[str, str] = status["files"]
    return _json(
        {
            "version": status["version"],
            "directory": status["directory"],
            "files": sorted(sources),
            "sources": sources,
            "policies": status["policies"],
            "refused": status["refused"],
        }
    )


_SCOPE_TYPES: dict[Scope, frozenset[str]] = {
    Scope.CATALOG: frozenset({"catalog"}),
    Scope.WAREHOUSE: frozenset({"warehouse"}),
    Scope.CONTAINER: frozenset({"warehouse", "namespace"}),
    Scope.NAMESPACE: frozenset({"namespace"}),
    Scope.TABLE: frozenset({"table"}),
    Scope.VIEW: frozenset({"view"}),
    Scope.API_KEY: frozenset({"api-key"}),
}


async def _explain_resource(request: web.Request, action: str, spec: ExplainResource) -> tuple[Resource, str]:
    """The resource to decide on and where its grants came from ("request" or "catalog"), built
    like the pipeline's (`gateway.authz.naming.build`)."""
    name, source = await _explain_name(request, action, spec)
    grants: GrantSource
    if source == "catalog" and name.kind is not EntityType.API_KEY:
        grants = resources.RegistryGrants(services(request), fresh=False)
    else:
        grants = StatedGrants(spec.namespace_properties or (), spec.warehouse_properties)
    return await naming.build(name, grants), source


async def _explain_name(request: web.Request, action: str, spec: ExplainResource) -> tuple[ResourceName, str]:
    """What the explain body names, checked against the action's scope, and where its grants come
    from. Raises InvalidRequestError, NotFoundError (an unknown API key), NoSuchWarehouseError."""
    scope = OPERATIONS[action].scope
    if spec.type not in _SCOPE_TYPES.get(scope, frozenset()):
        allowed = " or ".join(sorted(_SCOPE_TYPES.get(scope, frozenset())))
        raise InvalidRequestError(f"{action} decides on a {allowed} resource, not a {spec.type}")
    if spec.type == "catalog":
        return ResourceName(EntityType.CATALOG), "request"
    if spec.type == "api-key":
        if spec.id is None or not is_key_id(spec.id):
            raise InvalidRequestError("resource.id must be an API key id")
        owner = spec.owner
        if owner is None:
            with _key_errors():
                owner = (await security(request).api_keys.get_key(spec.id)).principal_id
        source = "request" if spec.owner is not None else "catalog"
        return ResourceName(EntityType.API_KEY, name=spec.id, owner=owner), source
    svc = services(request)
    warehouse = spec.warehouse or svc.ctx.default_warehouse
    if spec.type == "warehouse":
        if spec.namespace is not None or spec.name is not None:
            raise InvalidRequestError("a warehouse resource has no namespace or name")
        return ResourceName(EntityType.WAREHOUSE, warehouse), "request"
    namespace = Namespace.of(spec.namespace)
    if (spec.type == "namespace") != (spec.name is None):
        raise InvalidRequestError(f"a {spec.type} resource {'has no' if spec.name else 'needs a'} name")
    source = "request" if spec.namespace_properties is not None else "catalog"
    if source == "catalog" and warehouse not in svc.ctx.warehouses:
        raise NoSuchWarehouseError(f"warehouse does not exist: {warehouse}")
    if spec.name is None:
        return ResourceName(EntityType.NAMESPACE, warehouse, namespace.levels), source
    Identifier.of(namespace, spec.name)  # validates the name
    kind = EntityType.TABLE if spec.type == "table" else EntityType.VIEW
    return ResourceName(kind, warehouse, namespace.levels, spec.name), source


async def explain_decision(request: web.Request) -> web.Response:
    """Decide a hypothetical request with the active policies and say why (`explanation`)."""
    body = http.validate(ExplainRequest, await http.json_object(request, MAX_BODY_BYTES))
    return _json(await explanation(request, body))


async def explanation(request: web.Request, body: ExplainRequest) -> dict[str, Any]:
    """The answer of `POST /admin/v1/explain` to `body`: the decision of the active policies, the
    determining policies, the restrictions and where they cannot bind, and the grants read. The
    console's Explain page shows the same answer (`routes.console_explain`).

    Grants come from `resource.namespace_properties` if given, else from the catalog's namespaces
    (missing ones count as having no properties), as the gateway itself would decide. Raises
    InvalidRequestError (not a Cedar action, a bad auth_method, a resource of the wrong kind),
    NotFoundError (an unknown API key) and NoSuchWarehouseError.
    """
    spec = OPERATIONS.get(body.action)
    if spec is None or spec.action is None:
        raise InvalidRequestError(f"not a Cedar action: {body.action!r}")
    try:
        who = Principal(
            id=body.principal,
            kind=PrincipalKind(body.kind),
            groups=frozenset(body.groups),
            auth_method=AuthMethod(body.auth_method),
            attributes=dict(body.attributes),
        )
    except ValueError:
        methods = ", ".join(m.value for m in AuthMethod)
        raise InvalidRequestError(f"auth_method must be one of {methods}") from None
    resource, source = await _explain_resource(request, body.action, body.resource)
    changes = ChangeSummary(
        frozenset(body.context.update_kinds),
        frozenset(body.context.refs),
        frozenset(body.context.property_keys),
        body.context.creates,
    )
    engine = security(request).policies
    context = RequestContext.of(who, body.client_address, changes)
    decision = engine.decide(who, body.action, resource, context)
    warehouses = binding.warehouse_locations(services(request).settings)
    findings = binding.Judge(engine, context, warehouses).decision(decision, who, resource)
    active = engine.active
    locations = active.locations if active is not None else {}
    return {
        "decision": "allow" if decision.allowed else "deny",
        "allowed": decision.allowed,
        "principal": decision.principal,
        "action": decision.action,
        "resource": decision.resource,
        "policy_ids": list(decision.policy_ids),
        "policies": [{"id": p, "location": locations.get(p)} for p in decision.policy_ids],
        "errors": list(decision.errors),
        "version": decision.version,
        "grants_from": source,
        # Scans this Allow permits are narrowed to these (policies/README.md, restrictions).
        "restrictions": describe(engine.scan_rules(decision)),
        # Where those restrictions do not bind, and what does instead (binding.py).
        "restrictions_not_binding": binding.as_json(findings),
        # The grants the decision read: the warehouse's and each namespace's (grant_chain.py).
        "grants": grant_chain(resource),
    }


ROUTES = [
    Route("POST", API_KEYS, create_api_key, "createApiKey", advertised=False),
    Route("GET", API_KEYS, list_api_keys, "listApiKeys", advertised=False),
    Route("GET", API_KEY, get_api_key, "getApiKey", advertised=False),
    Route("POST", f"{API_KEY}/rotate", rotate_api_key, "rotateApiKey", advertised=False),
    Route("DELETE", API_KEY, revoke_api_key, "revokeApiKey", advertised=False),
    Route("GET", f"{ADMIN}/policies", show_policies, "showPolicies", advertised=False),
    Route("POST", f"{ADMIN}/explain", explain_decision, "explainDecision", advertised=False),
]
