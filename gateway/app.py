"""The aiohttp application: resources in dependency order, routes from one table."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator

from aiohttp import web

from catalog.context import CatalogContext, Limits, Warehouse
from catalog.idempotency import Idempotency
from catalog.store.sql import Store
from gateway.authz.operations import check_route_table
from gateway.middleware import MIDDLEWARES
from gateway.pipeline import ROUTE_TABLE
from gateway.routes import admin, config, namespaces, oauth, tables, views
from gateway.routes.route import Route
from gateway.security import SECURITY, Security
from gateway.services import ENDPOINTS, SERVICES, Services
from gateway.settings import Settings

log = logging.getLogger("cedarberg")

ALL_ROUTES: tuple[Route, ...] = (
    *config.ROUTES,
    *oauth.ROUTES,
    *namespaces.ROUTES,
    *tables.ROUTES,
    *views.ROUTES,
    *admin.ROUTES,
)
_IDEMPOTENCY_SWEEP_SECONDS = 300


def _register(app: web.Application, routes: tuple[Route, ...]) -> None:
    """Register every route with its operation. A route whose operation has no entry in the
    authorization table cannot be registered (check_route_table raises)."""
    check_route_table(route.operation for route in routes)
    table: dict[tuple[str, str], Route] = {}
    # Un-prefixed routes first: they serve the default warehouse, and matching them first keeps
    # "/v1/namespaces/..." from being read as a warehouse called "namespaces" (a reserved name).
    for route in routes:
        if "{prefix}" in route.path:
            path = route.path.replace("/{prefix}", "")
            app.router.add_route(route.method, path, route.handler)
            table[(route.method, path)] = route
    for route in routes:
        app.router.add_route(route.method, route.path, route.handler)
        table[(route.method, route.path)] = route
    app[ROUTE_TABLE] = table


async def _sweep_idempotency(store: Store, lifetime: int) -> None:
    while True:
        await asyncio.sleep(_IDEMPOTENCY_SWEEP_SECONDS)
        try:
            async with store.write() as tx:
                await tx.purge_idempotency(time.time() - 2 * lifetime)
        except Exception:
            log.exception("idempotency sweep failed")


def create_app(settings: Settings) -> web.Application:
    """Build the application; the registry opens when the app starts (cleanup context)."""
    app = web.Application(middlewares=MIDDLEWARES, client_max_size=settings.max_body_bytes)
    app[ENDPOINTS] = [route.endpoint for route in ALL_ROUTES if route.advertised]

    async def catalog_resources(app: web.Application) -> AsyncIterator[None]:
        store = await Store.open(settings.effective_store_url())
        ctx = CatalogContext(
            store=store,
            warehouses={
                name: Warehouse(name, warehouse.location)
                for name, warehouse in settings.effective_warehouses().items()
            },
            default_warehouse=settings.default_warehouse,
            idempotency=Idempotency(store, settings.idempotency_key_lifetime_seconds),
            limits=Limits(default_page_size=settings.default_page_size, max_page_size=settings.max_page_size),
        )
        app[SERVICES] = Services.build(settings, ctx)
        sweeper = asyncio.create_task(_sweep_idempotency(store, settings.idempotency_key_lifetime_seconds))
        yield
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await store.close()

    async def security_services(app: web.Application) -> AsyncIterator[None]:
        security = await Security.open(settings)
        app[SECURITY] = security
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(security.reload_policies()))
        yield
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGHUP)
        await security.close()

    app.cleanup_ctx.append(catalog_resources)
    app.cleanup_ctx.append(security_services)
    _register(app, ALL_ROUTES)
    return app
