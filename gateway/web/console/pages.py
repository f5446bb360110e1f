"""Rendering console pages: Jinja2 templates shipped in the package, and the headers every
console answer carries.

Templates are read with `importlib.resources` (they install as package data) and rendered with
autoescape on, so nothing a catalog or a caller names can become markup. Pages carry no inline
script or style: the Content-Security-Policy allows scripts, styles and images from the gateway
only, forms posting only to it, no framing and no `<base>`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

import jinja2
from aiohttp import web

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
# On every console answer: pages, redirects, errors and the style sheet.
SECURITY_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
# Pages show what one principal may see: never kept by the browser or anything in between.
NO_STORE: Final[Mapping[str, str]] = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_PACKAGE = "cedarberg.gateway.web.console"
# What the layout reads on every page; a signed-in page sets them (`layout.page`).
_LAYOUT_DEFAULTS: Final[Mapping[str, Any]] = {
    "me": None,
    "navigation": (),
    "csrf_field": "csrf_token",
    "csrf": "",
    "section": "",
}


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the test that renders it
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _template_source(name: str) -> str | None:
    if "/" in name or "\\" in name or not name.endswith(".html"):
        return None
    entry = resources.files(_PACKAGE).joinpath("templates", name)
    return entry.read_text(encoding="utf-8") if entry.is_file() else None


def static_file(name: str) -> bytes | None:
    """The bytes of the shipped static file `name` (a plain file name), or None."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    entry = resources.files(_PACKAGE).joinpath("static", name)
    return entry.read_bytes() if entry.is_file() else None


def render_text(template: str, context: Mapping[str, Any]) -> str:
    """`template` rendered with `context` (autoescaped). Raises jinja2's errors for a template
    that does not exist or names what `context` lacks (programming errors)."""
    return _environment().get_template(template).render({**_LAYOUT_DEFAULTS, **context})


def html(body: str, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """An HTML answer with the console's headers (no caching)."""
    response = web.Response(status=status, text=body, content_type="text/html", charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    response.headers.update(NO_STORE)
    if headers:
        response.headers.update(headers)
    return response


def see_other(location: str) -> web.Response:
    """303 to a console path (after a form: the browser then GETs `location`)."""
    if not location.startswith("/console/"):
        raise ValueError(f"console redirects stay in the console: {location!r}")
    response = web.Response(status=303, headers={"Location": location})
    response.headers.update(SECURITY_HEADERS)
    response.headers.update(NO_STORE)
    return response
