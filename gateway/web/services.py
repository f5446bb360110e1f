"""The catalog services and settings, as one typed object on the aiohttp application."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.idempotency import Mutation
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.pagination import PageRequest
from cedarberg.catalog.planning.service import PlanService
from cedarberg.catalog.tables import TableService
from cedarberg.catalog.views import ViewService
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.resource_memo import ResourceMemo
from cedarberg.gateway.web import http
from cedarberg.gateway.web.caller import caller_of
from cedarberg.gateway.web.keys import services


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    ctx: CatalogContext
    namespaces: NamespaceService
    tables: TableService
    views: ViewService
    plans: PlanService
    resources: ResourceMemo = field(default_factory=ResourceMemo)

    @classmethod
    def build(cls, settings: Settings, ctx: CatalogContext) -> Services:
        return cls(
            settings,
            ctx,
            NamespaceService(ctx),
            TableService(ctx),
            ViewService(ctx),
            PlanService(ctx, settings.planning.limits()),
        )

    def page(self, request: web.Request) -> PageRequest:
        return PageRequest.parse(
            http.query_value(request, "pageToken"),
            http.query_value(request, "pageSize"),
            self.settings.default_page_size,
            self.settings.max_page_size,
            caller_of(request),
        )


async def mutate(request: web.Request, mutation: Mutation) -> web.Response:
    """Run a mutation under the request's Idempotency-Key and answer its JSON (or 204)."""
    key = http.idempotency_key(request)
    body = await services(request).ctx.idempotency.run(
        key,
        http.operation_fingerprint(request),
        mutation,
        caller=caller_of(request),
        # Read only when a key is sent: the body is then hashed, never stored.
        request=b"" if key is None else await http.request_fingerprint(request),
    )
    return http.json_response(body)
