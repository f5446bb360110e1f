"""The route declaration shared by all route modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from pydantic import BaseModel

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # as in the spec, e.g. "/v1/{prefix}/namespaces/{namespace}"
    handler: Handler
    operation: str  # the spec's operationId
    advertised: bool = True  # False for routes that answer 501
    # The request document, parsed once before authorization (`gateway.web.http.parsed_body`): Cedar
    # and the handler see the same typed objects, and a malformed body is a 400 before any decision.
    body: type[BaseModel] | None = None
    max_body_bytes: int | None = None  # a tighter bound than the application's for this body

    @property
    def endpoint(self) -> str:
        # aiohttp variables cannot hold '-'; the spec's path spells plan ids "plan-id".
        return f"{self.method} {self.path.replace('{plan_id}', '{plan-id}')}"
