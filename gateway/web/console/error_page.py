"""The console's answer to an error: the same status and message the error table gives any
request (`gateway.web.errors`), as a page. A request that needs a session and has none (401) gets
a page that sends the browser to sign in."""

from __future__ import annotations

from aiohttp import web

from cedarberg.gateway.web.console.pages import html, render_text

SIGNIN_PATH = "/console/signin"


def error_page(status: int, message: str, headers: dict[str, str] | None) -> web.Response:
    """The page for an error answered with `status` and `message` (and the error's headers, e.g.
    Retry-After; a challenge for bearer tokens means nothing to a browser and is left out)."""
    kept = {k: v for k, v in (headers or {}).items() if k.lower() != "www-authenticate"}
    if status == 401:
        return html(render_text("signin_needed.html", {"signin": SIGNIN_PATH}), status, kept)
    return html(render_text("error.html", {"status": status, "message": message}), status, kept)
