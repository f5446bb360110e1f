"""Admin routes for soft-deleted objects and the key service.

    GET  /admin/v1/warehouses/{warehouse}/dropped                   listDroppedObjects
         {"dropped": [{"drop-id", "kind", "namespace", "name", "uuid", "dropped-at-ms",
                       "purge-after-ms", "purge-attempts", "last-purge-error" (null or a short
                       message), "next-purge-attempt-ms"}], "next-page-token"}
    POST /admin/v1/warehouses/{warehouse}/dropped/{drop_id}/undrop  undropObject
         the restored object's description (404 unknown drop id, 409 name taken)
    GET  /admin/v1/kms                                              showKms
         {"kek": URI, "counters": {...}}: KMS calls by provider/operation/outcome, cache hits

Authentication and Cedar (admin actions on the Catalog) run before these handlers.
"""

from __future__ import annotations

from aiohttp import web

from cedarberg.catalog import documents
from cedarberg.catalog.dropped import list_dropped, undrop
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.services import mutate

ADMIN = "/admin/v1"
DROPPED = ADMIN + "/warehouses/{warehouse}/dropped"


async def list_dropped_objects(request: web.Request) -> web.Response:
    svc = services(request)
    return http.json_response(await list_dropped(svc.ctx, request.match_info["warehouse"], svc.page(request)))


async def undrop_object(request: web.Request) -> web.Response:
    svc = services(request)
    warehouse, drop_id = request.match_info["warehouse"], request.match_info["drop_id"]
    return await mutate(request, lambda rec: undrop(svc.ctx, warehouse, drop_id, rec))


async def show_kms(request: web.Request) -> web.Response:
    keyring = services(request).ctx.sealer.keyring
    return http.json_response(documents.dumps({"kek": keyring.kek_uri, "counters": keyring.stats()}))


ROUTES = [
    Route("GET", DROPPED, list_dropped_objects, "listDroppedObjects", advertised=False),
    Route("POST", DROPPED + "/{drop_id}/undrop", undrop_object, "undropObject", advertised=False),
    Route("GET", ADMIN + "/kms", show_kms, "showKms", advertised=False),
]
