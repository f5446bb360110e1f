"""Where the Access page ("Who can access this") of an object is, and whether to offer its link.

Apart from the page's route (`routes/console_access.py`) so that the catalog's pages can link to
it without importing the review.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from aiohttp import web

from cedarberg.gateway.authz.entities import catalog_resource, encode_name
from cedarberg.gateway.web.console.decisions import would_allow

ACCESS: Final = "/console/access"
ACTION: Final = "reviewAccess"  # the admin endpoint's (`GET /admin/v1/review`) own action


def access_url(
    warehouse: str, levels: tuple[str, ...] = (), name: str | None = None, view: bool = False
) -> str:
    """The Access page of an object: the warehouse, a namespace (`levels`), a table or view in it."""
    query = {"warehouse": warehouse}
    if levels:
        query["namespace"] = ".".join(encode_name(level) for level in levels)
    if name is not None:
        query["name"] = name
        query["type"] = "view" if view else "table"
    return f"{ACCESS}?{urlencode(query)}"


def access_link(
    request: web.Request,
    warehouse: str,
    levels: tuple[str, ...] = (),
    name: str | None = None,
    view: bool = False,
) -> str | None:
    """`access_url` for an object page's "Who can access this" link, when the signed-in principal
    may open it (`reviewAccess`); else None. Not audited: following it is decided as its own page."""
    if not would_allow(request, ACTION, catalog_resource()):
        return None
    return access_url(warehouse, levels, name, view)
