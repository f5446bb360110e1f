"""A console page in its layout: the navigation, who is signed in, and the sign-out form with the
session's CSRF token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from cedarberg.gateway.web.console.pages import html, render_text
from cedarberg.gateway.web.console.session_auth import CSRF_FIELD, cookie_secret, csrf_token
from cedarberg.gateway.web.keys import PRINCIPAL

# The console's sections, in navigation order: only pages that exist are listed (Who can access,
# Explain, Audit, Policies and Keys join here as they are built).
NAVIGATION: Final = (("Catalog", "/console/catalog"),)


def page(request: web.Request, template: str, context: Mapping[str, Any], status: int = 200) -> web.Response:
    """`template` rendered in the layout for the signed-in principal (none on sign-in pages)."""
    principal = request.get(PRINCIPAL)
    secret = cookie_secret(request)
    signed_in = principal is not None and secret is not None
    full = {
        "me": principal.id if principal is not None and secret is not None else None,
        "csrf_field": CSRF_FIELD,
        "csrf": csrf_token(secret) if principal is not None and secret is not None else "",
        "navigation": NAVIGATION if signed_in else (),
        "section": context.get("section", ""),
        **context,
    }
    return html(render_text(template, full), status)
