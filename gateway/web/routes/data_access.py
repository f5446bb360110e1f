"""Access to a table's files for engines: `X-Iceberg-Access-Delegation` on create/load/register, and
`GET .../credentials` (loadCredentials).

Vended credentials are added to a load result per request, after the load-result cache and the
idempotency record: neither ever holds them. What a caller gets is decided by `decide_file_access`:
nothing (the load is answered without credentials), read-only, or read-write. A caller whose read
is restricted gets them only when its client is trusted to enforce the restrictions; the vending's
audit record then says so (`restrictions: enforced-by-client`). Read-write credentials are handed
out only once the vending's records are durable (`AuditLog.durable`; 503 otherwise).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from cedarberg.catalog.errors import ForbiddenError, InvalidRequestError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.gateway.audit import AuditEvent, EventKind, Outcome
from cedarberg.gateway.storage.access import WarehouseStorage
from cedarberg.gateway.storage.properties import engine_properties
from cedarberg.gateway.storage.s3_scope import S3Scope
from cedarberg.gateway.web import http, replay
from cedarberg.gateway.web.file_access import (
    RESTRICTED,
    FileAccess,
    decide_file_access,
    require_confined,
    table_resource,
)
from cedarberg.gateway.web.keys import PRINCIPAL, request_id_of, security, services, storage

DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
VENDED = "vended-credentials"
SIGNING = "remote-signing"
SIGNER = "S3V4RestSigner"  # pyiceberg's name for the REST signer client
# The newer form of the signer settings (`remote-signing-config` of a LoadTableResult): nothing to
# pass through, no static headers. A client that reads it contacts the default signing endpoint,
# the table's `.../sign` route under the catalog URI, which is where the gateway signs; the
# `s3.signer*` config keys stay for clients that predate it (Iceberg 1.10, pyiceberg).
REMOTE_SIGNING_CONFIG: dict[str, dict[str, Any]] = {"properties": {}, "headers": {}}
# Answers that may carry credentials are never stored by a client or proxy.
NO_STORE = {"Cache-Control": "no-store"}
# What a vending's audit record says when the caller's read is restricted and its client trusted.
ENFORCED_BY_CLIENT = "enforced-by-client"


def _warehouse(request: web.Request) -> WarehouseStorage | None:
    name = services(request).ctx.warehouse(http.prefix(request)).name
    return storage(request).s3_warehouse(name)


def _delegation(request: web.Request, warehouse: WarehouseStorage | None) -> str | None:
    """The access delegation to answer with: vended credentials when asked for and configured,
    else remote signing when asked for (any S3 warehouse), else none."""
    asked = {part.strip().lower() for part in request.headers.get(DELEGATION_HEADER, "").split(",")}
    if warehouse is None:
        return None
    if VENDED in asked and warehouse.vendor is not None:
        return VENDED
    return SIGNING if SIGNING in asked else None


def wants_storage_config(request: web.Request) -> bool:
    """Whether this request's answer will carry storage configuration (then it is never a 304)."""
    return _delegation(request, _warehouse(request)) is not None


async def with_storage_config(
    request: web.Request, identifier: Identifier, body: bytes | None
) -> bytes | None:
    """A LoadTableResult with the storage configuration the client asked for and may have."""
    warehouse = _warehouse(request)
    mode = _delegation(request, warehouse)
    if mode is None or body is None or warehouse is None:
        return body
    document: dict[str, Any] = orjson.loads(body)
    location = document["metadata"]["location"]
    table = await table_resource(request, identifier, fresh=True)
    config: dict[str, str] = document.setdefault("config", {})
    if mode == VENDED:
        access = decide_file_access(request, table, "loadCredentials")
        if not access.read:
            return body  # a load the caller may make, without credentials it may not have
        await require_confined(request, "loadCredentials", table, document["metadata"])
        vended = await _vend(request, warehouse, str(table), location, access)
        config.update(vended)
        document["storage-credentials"] = [{"prefix": location, "config": vended}]
    else:
        if not decide_file_access(request, table, "signRequest", want_write=False).read:
            return body
        await require_confined(request, "signRequest", table, document["metadata"])
        config.update(signing_config(request, warehouse, identifier))
        document["remote-signing-config"] = REMOTE_SIGNING_CONFIG
    return orjson.dumps(document)


async def _vend(
    request: web.Request, warehouse: WarehouseStorage, table: str, location: str, access: FileAccess
) -> dict[str, str]:
    if warehouse.vendor is None:
        raise InvalidRequestError(
            f"warehouse {warehouse.name!r} does not vend credentials ([warehouses.{warehouse.name}.vending])"
        )
    write = access.write
    credentials = await warehouse.vendor.vend(S3Scope.of(location), write)
    detail: dict[str, str | int] = {
        "level": "read-write" if write else "read",
        "location": location,
        "access_key_id": credentials.access_key_id,
        "expires_at_ms": credentials.expires_at_ms,
    }
    if access.trusted:
        # Whole files reached a caller restricted to some columns or rows: its client must
        # enforce them (Cedar trusted it: readRestrictedData).
        detail["restrictions"] = ENFORCED_BY_CLIENT
    sec = security(request)
    replay.note_unreplayable()  # credentials are per request (the answer is no-store as well)
    sec.audit.record(
        AuditEvent(
            EventKind.MUTATION,
            request_id=request_id_of(request),
            principal=request[PRINCIPAL],
            action="vendCredentials",
            resource=table,
            outcome=Outcome.SUCCESS,
            policy_version=sec.policies.version,
            client_address=request.remote,
            detail=detail,
        )
    )
    if write:
        # Write credentials let the caller change the warehouse: handed out only once their
        # records are durable (else 503); read credentials follow `audit.reads_when_failing`.
        await sec.audit.durable()
    return warehouse.vendor.config(credentials)


def signing_config(
    request: web.Request, warehouse: WarehouseStorage, identifier: Identifier
) -> dict[str, str]:
    """Config for remote signing: the engine signs nothing itself and asks the table's sign route.
    The endpoint is relative to the catalog URI the engine already uses (behind a proxy the gateway
    cannot know its public address)."""
    prefix = http.prefix(request)
    namespace = quote("\x1f".join(identifier.namespace.levels), safe="")
    endpoint = f"v1/{quote(prefix, safe='') + '/' if prefix else ''}namespaces/{namespace}/tables/"
    return {
        **engine_properties(warehouse.s3),
        "s3.remote-signing-enabled": "true",
        "s3.signer": SIGNER,
        "s3.signer.endpoint": endpoint + quote(identifier.name, safe="") + "/sign",
    }


async def load_credentials(request: web.Request) -> web.Response:
    """loadCredentials: the table's vended credentials (`planId`, if sent, changes nothing: they
    cover the whole table location, which every plan of the table reads from)."""
    identifier = http.table(request)
    # Loaded first: a table that does not exist is a 404 whatever the warehouse can do.
    _etag, body = await services(request).tables.load(http.prefix(request), identifier, "refs", None)
    table = await table_resource(request, identifier, fresh=True)
    access = decide_file_access(request, table, "loadCredentials")
    if not access.read:  # the route's own decision allowed the read: only restrictions withhold it
        raise ForbiddenError(RESTRICTED if access.restricted else "Not allowed: loadCredentials")
    warehouse = _warehouse(request)
    if warehouse is None or warehouse.vendor is None:
        # The spec's answer when there is nothing to vend: no credentials (the engine then uses
        # its own storage access), not an error for an endpoint the config advertises.
        return http.json_response(orjson.dumps({"storage-credentials": []}), headers=NO_STORE)
    metadata = orjson.loads(body or b"{}")["metadata"]
    await require_confined(request, "loadCredentials", table, metadata)
    location = metadata["location"]
    config = await _vend(request, warehouse, str(table), location, access)
    document = {"storage-credentials": [{"prefix": location, "config": config}]}
    return http.json_response(orjson.dumps(document), headers=NO_STORE)
