"""The route declaration shared by all route modules: method, path, handler and operation.

What the operation needs beyond that is in its entries of the operation table (how its Cedar
resource is named: `gateway.authz.operations`) and of the body table (its body model:
`gateway.web.bodies`), not here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from cedarberg.gateway.config.settings import Settings

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
    # A console form larger than the console's short forms (an upload): its bound, from the
    # settings; checked on the Content-Length before anything is read. None: `MAX_FORM_BYTES`.
    form_bytes: Callable[[Settings], int] | None = None

    @property
    def endpoint(self) -> str:
        # aiohttp variables cannot hold '-'; the spec's path spells plan ids "plan-id".
        return f"{self.method} {self.path.replace('{plan_id}', '{plan-id}')}"
