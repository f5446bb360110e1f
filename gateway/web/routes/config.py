"""GET /v1/config: which warehouse (prefix) to use and which endpoints exist."""

from __future__ import annotations

from aiohttp import web

from cedarberg.catalog import documents, locations
from cedarberg.catalog.errors import InvalidRequestError, NoSuchWarehouseError
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import ENDPOINTS, services
from cedarberg.gateway.web.route import Route


def _resolve_warehouse(request: web.Request) -> str:
    """The warehouse a client names by name or by location; the default when it names none."""
    svc = services(request)
    wanted = http.query_value(request, "warehouse")
    if not wanted:
        return svc.ctx.default_warehouse
    if wanted in svc.ctx.warehouses:
        return wanted
    try:
        normalized = locations.normalize(wanted)
    except InvalidRequestError:
        normalized = None
    for name, warehouse in svc.ctx.warehouses.items():
        if warehouse.location == normalized:
            return name
    raise NoSuchWarehouseError(f"warehouse does not exist: {wanted}")


async def get_config(request: web.Request) -> web.Response:
    name = _resolve_warehouse(request)
    svc = services(request)
    return http.json_response(
        documents.dumps(
            {
                "defaults": {},
                "overrides": {"prefix": name},
                "endpoints": request.app[ENDPOINTS],
                "idempotency-key-lifetime": f"PT{svc.ctx.idempotency.lifetime_seconds}S",
            }
        )
    )


ROUTES = [Route("GET", "/v1/config", get_config, "getConfig", advertised=False)]
