"""The route declaration shared by all route modules: method, path, handler and operation.

What the operation needs beyond that is in its entries of the operation table (how its Cedar
resource is named: `gateway.authz.operations`) and of the body table (its body model:
`gateway.web.bodies`), not here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # as in the spec, e.g. "/v1/{prefix}/namespaces/{namespace}"
    handler: Handler
    operation: str  # the spec's operationId
    advertised: bool = True  # False for routes that answer 501
    # A console route (/console/): its caller is the browser's console session (the session cookie,
    # `gateway.web.console.session_auth`), never an Authorization header; an unsafe method must
    # carry the session's CSRF token and come from the console's origin.
    session: bool = False

    @property
    def endpoint(self) -> str:
        # aiohttp variables cannot hold '-'; the spec's path spells plan ids "plan-id".
        return f"{self.method} {self.path.replace('{plan_id}', '{plan-id}')}"
