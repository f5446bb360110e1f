"""Who is asking, as one opaque string: what page tokens and idempotency records are bound to.

The binding combines how the principal authenticated, its kind and its id, so equal ids from
different authentication methods never share a token or an idempotency record.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.web.keys import PRINCIPAL


def binding(principal: Principal) -> str:
    """The principal's binding: stable for as long as it authenticates the same way."""
    # A JSON array is unambiguous whatever the id contains.
    return orjson.dumps([str(principal.auth_method), str(principal.kind), principal.id]).decode()


def caller_of(request: web.Request) -> str:
    """The binding of the request's authenticated principal; '' on a public route (which neither
    lists nor mutates)."""
    principal = request.get(PRINCIPAL)
    return binding(principal) if isinstance(principal, Principal) else ""
