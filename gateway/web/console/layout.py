"""A console page in its layout: the navigation, who is signed in, and the sign-out form with the
session's CSRF token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from cedarberg.gateway.authz.entities import catalog_resource
from cedarberg.gateway.web.console.decisions import would_allow
from cedarberg.gateway.web.console.pages import html, render_text
from cedarberg.gateway.web.console.session_auth import CSRF_FIELD, cookie_secret, csrf_token
from cedarberg.gateway.web.keys import PRINCIPAL

# The console's sections, in navigation order: (label, address, the action on the catalog that the
# section's page needs). A signed-in principal sees the sections its policies allow it to open: a
# link it may not follow is left out (following one anyway is decided, and refused, as usual).
NAVIGATION: Final = (
    ("Catalog", "/console/catalog", "useConsole"),
    ("Access", "/console/access", "reviewAccess"),
    ("Explain", "/console/explain", "explainDecision"),
    ("Audit trail", "/console/audit", "readAuditLog"),
    ("Policies", "/console/policies", "showPolicies"),
    ("Keys", "/console/keys", "listApiKeys"),
)


def _sections(request: web.Request) -> tuple[tuple[str, str], ...]:
    catalog = catalog_resource()
    return tuple((label, url) for label, url, action in NAVIGATION if would_allow(request, action, catalog))


def page(request: web.Request, template: str, context: Mapping[str, Any], status: int = 200) -> web.Response:
    """`template` rendered in the layout for the signed-in principal (none on sign-in pages)."""
    principal = request.get(PRINCIPAL)
    secret = cookie_secret(request)
    signed_in = principal is not None and secret is not None
    full = {
        "me": principal.id if principal is not None and secret is not None else None,
        "csrf_field": CSRF_FIELD,
        "csrf": csrf_token(secret) if principal is not None and secret is not None else "",
        "navigation": _sections(request) if signed_in else (),
        "section": context.get("section", ""),
        **context,
    }
    return html(render_text(template, full), status)
