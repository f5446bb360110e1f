"""The aiohttp application: resources in dependency order, routes from one table."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import signal
import time
from collections.abc import AsyncIterator

from aiohttp import web

from cedarberg.catalog import confinement, metrics_reports
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.dropped import purge_due
from cedarberg.catalog.planning.service import PlanService
from cedarberg.catalog.purge_failures import PurgeBackoff
from cedarberg.catalog.store import idempotency as idempotency_rows
from cedarberg.catalog.store.pool import Store
from cedarberg.gateway.authz.operations import check_route_table
from cedarberg.gateway.catalog_setup import close_catalog, open_catalog
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.metrics import Metrics
from cedarberg.gateway.storage.access import StorageAccess
from cedarberg.gateway.web.bodies import check_body_table
from cedarberg.gateway.web.keys import (
    ACCESS_LOG,
    ENDPOINTS,
    LIFECYCLE,
    METRICS,
    ROUTE_TABLE,
    SECURITY,
    SERVICES,
    STORAGE,
    Lifecycle,
)
from cedarberg.gateway.web.middlewares import MIDDLEWARES
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes import (
    admin,
    admin_openapi,
    audit_trail,
    config,
    console_access,
    console_audit,
    console_catalog,
    console_explain,
    console_keys,
    console_policies,
    console_signin,
    console_users,
    directory,
    namespaces,
    oauth,
    ops,
    planning,
    policy_preview,
    recovery,
    review,
    tables,
    views,
)
from cedarberg.gateway.web.security import Security
from cedarberg.gateway.web.services import Services

log = logging.getLogger("cedarberg")

ALL_ROUTES: tuple[Route, ...] = (
    *config.ROUTES,
    *oauth.ROUTES,
    *namespaces.ROUTES,
    *tables.ROUTES,
    *planning.ROUTES,
    *views.ROUTES,
    *admin.ROUTES,
    *admin_openapi.ROUTES,
    *audit_trail.ROUTES,
    *directory.ROUTES,
    *review.ROUTES,
    *policy_preview.ROUTES,
    *recovery.ROUTES,
    *ops.ROUTES,
)
# The browser console (/console/), registered only when `console.enabled`: its routes are
# authenticated by the console's session (`Route.session`) and answer pages, not ErrorModels.
CONSOLE_ROUTES: tuple[Route, ...] = (
    *console_signin.ROUTES,
    *console_catalog.ROUTES,
    *console_access.ROUTES,
    *console_explain.ROUTES,
    *console_audit.ROUTES,
    *console_policies.ROUTES,
    *console_keys.ROUTES,
    *console_users.ROUTES,
)
_IDEMPOTENCY_SWEEP_SECONDS = 300


_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _matching(path: str) -> str:
    """The aiohttp pattern of a spec path: each variable matches any character but '/'.

    aiohttp's default variable pattern also excludes '{' and '}', so a namespace or table whose
    name holds a brace could be created (names arrive in bodies) but never addressed again. The
    resource's canonical path (the route table's key) stays the spec's, without the regex."""
    return _VARIABLE.sub(r"{\1:[^/]+}", path)


def _register(app: web.Application, routes: tuple[Route, ...]) -> None:
    """Register every route with its operation. A route whose operation has no entry in the
    authorization table cannot be registered (check_route_table raises), nor routes beside a
    table of bodies that does not match the authorization table (check_body_table raises)."""
    check_route_table(route.operation for route in routes)
    check_body_table()
    table: dict[tuple[str, str], Route] = {}
    # Un-prefixed routes first: they serve the default warehouse, and matching them first keeps
    # "/v1/namespaces/..." from being read as a warehouse called "namespaces" (a reserved name).
    for route in routes:
        if "{prefix}" in route.path:
            path = route.path.replace("/{prefix}", "")
            app.router.add_route(route.method, _matching(path), route.handler)
            table[(route.method, path)] = route
    for route in routes:
        app.router.add_route(route.method, _matching(route.path), route.handler)
        table[(route.method, route.path)] = route
    app[ROUTE_TABLE] = table


async def _sweep_idempotency(store: Store, lifetime: int) -> None:
    while True:
        await asyncio.sleep(_IDEMPOTENCY_SWEEP_SECONDS)
        try:
            async with store.write() as tx:
                await idempotency_rows.purge_idempotency(tx, time.time() - 2 * lifetime)
        except Exception:
            log.exception("idempotency sweep failed")


async def _sweep_dropped(ctx: CatalogContext, interval: float, backoff: PurgeBackoff) -> None:
    """Purge due soft-deleted objects every `interval` until cancelled. purge_due isolates each
    object's failures; what reaches here is the registry failing (logged, tried next interval)."""
    while True:
        await asyncio.sleep(interval)
        try:
            await purge_due(ctx, backoff)
        except Exception:
            log.exception("purge of dropped tables failed")


def _purge_backoff(settings: Settings) -> PurgeBackoff:
    return PurgeBackoff(settings.purge_retry_initial_seconds, settings.purge_retry_max_seconds)


async def _sweep_metrics(store: Store, retention_seconds: int, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await metrics_reports.sweep(store, retention_seconds)
        except Exception:
            log.exception("sweep of expired metrics reports failed")


async def _sweep_plans(plans: PlanService, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await plans.sweep()
        except Exception:
            log.exception("sweep of expired scan plans failed")


# The collector's thresholds for a serving process (CPython's are 700, 10, 10). With the
# defaults a write load (8 clients creating namespaces) ran 13 full collections in 20 s, each
# walking the caches' few hundred thousand objects for 50-200 ms (p99 130 ms); with these, one
# (p99 4-38 ms), and no lower throughput. Most of a request's garbage is freed by reference
# counting before a collection would see it, so a larger first generation costs little memory.
GC_THRESHOLDS = (10_000, 20, 100)


async def _freeze_heap(_app: web.Application) -> None:
    """Move everything built at start-up (modules, policies, pools) out of the garbage collector's
    reach: a full collection would otherwise walk that whole heap, a pause of a tenth of a second
    or more in the middle of requests. Then collect less often (`GC_THRESHOLDS`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def create_app(settings: Settings) -> web.Application:
    """Build the application; the registry opens when the app starts (cleanup context)."""
    app = web.Application(middlewares=MIDDLEWARES, client_max_size=settings.max_body_bytes)
    app[ENDPOINTS] = [route.endpoint for route in ALL_ROUTES if route.advertised]
    app[ACCESS_LOG] = settings.access_log
    app[STORAGE] = StorageAccess(settings)
    # Built here, in the worker process that serves (see gateway.metrics).
    metrics = app[METRICS] = Metrics.create()
    lifecycle = app[LIFECYCLE] = Lifecycle()

    async def drain(_app: web.Application) -> None:
        lifecycle.draining = True  # the socket is closed already; /ready now says so

    async def catalog_resources(app: web.Application) -> AsyncIterator[None]:
        ctx = await open_catalog(settings, migrate=False, serving=True)
        # Objects from before exclusive locations get their roots recorded (never fails start-up).
        await confinement.backfill(ctx)
        ctx.sealer.keyring.observer = metrics
        metrics.watch_pool(ctx.store, ctx.store.pool_capacity)
        app[SERVICES] = Services.build(settings, ctx)
        sweepers = [
            asyncio.create_task(_sweep_idempotency(ctx.store, settings.idempotency_key_lifetime_seconds)),
            asyncio.create_task(
                _sweep_dropped(ctx, settings.purge_interval_seconds, _purge_backoff(settings))
            ),
            asyncio.create_task(
                _sweep_metrics(
                    ctx.store, settings.metrics_report_retention_seconds, settings.purge_interval_seconds
                )
            ),
            asyncio.create_task(_sweep_plans(app[SERVICES].plans, settings.planning.sweep_interval_seconds)),
        ]
        yield
        for sweeper in sweepers:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        await app[SERVICES].plans.close()
        await close_catalog(ctx)

    async def security_services(app: web.Application) -> AsyncIterator[None]:
        security = await Security.open(settings)
        security.audit.observe(metrics)
        security.policies.observe(metrics)
        app[SECURITY] = security
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(security.reload_policies()))
        yield
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGHUP)
        await security.close()

    app.on_shutdown.append(drain)
    app.cleanup_ctx.append(catalog_resources)
    app.cleanup_ctx.append(security_services)
    app.on_startup.append(_freeze_heap)
    _register(app, ALL_ROUTES + (CONSOLE_ROUTES if settings.console.enabled else ()))
    return app
