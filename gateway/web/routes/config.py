"""GET /v1/config: which warehouse (prefix) to use and which endpoints exist."""

from __future__ import annotations

from aiohttp import web

from cedarberg.catalog import documents
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import ENDPOINTS, services
from cedarberg.gateway.web.route import Route


async def get_config(request: web.Request) -> web.Response:
    """The configuration of the warehouse the client names by name or by location (the default
    one when it names none), resolved as the pipeline resolved it to decide the request."""
    svc = services(request)
    name = svc.ctx.find_warehouse(http.query_value(request, "warehouse")).name
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
