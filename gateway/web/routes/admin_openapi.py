"""`GET /admin/v1/openapi.json`: the admin API's OpenAPI 3.1 document (`routes.openapi`).

Decided by Cedar like every admin operation (`showAdminApi` on the catalog; with the bundled
policies, admins only): the document describes only code, but which gateway runs which API is
nothing a stranger needs. Built once per process, from the routes this application registered.
"""

from __future__ import annotations

from functools import cache

import orjson
from aiohttp import web

from cedarberg.gateway.web.keys import ROUTE_TABLE
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.openapi.document import PREFIX, build

PATH = f"{PREFIX}/openapi.json"


@cache
def _document(routes: tuple[Route, ...]) -> bytes:
    return orjson.dumps(build(routes))


async def show_admin_api(request: web.Request) -> web.Response:
    routes = tuple(sorted(request.app[ROUTE_TABLE].values(), key=lambda r: (r.path, r.method)))
    return web.Response(body=_document(routes), content_type="application/json")


ROUTES = [Route("GET", PATH, show_admin_api, "showAdminApi", advertised=False)]
