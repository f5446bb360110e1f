"""Operating the gateway: probes and metrics.

    GET /health    checkHealth      public   200 while the process serves requests (liveness)
    GET /ready     checkReadiness   public   200 when the registry, the KMS, the policies, the
                                             audit log and the rate limits' storage are usable;
                                             503 otherwise and once shutdown has begun
    GET /metrics   readMetrics      Cedar    Prometheus text format, summed over the workers

The probes are public because orchestrators call them without credentials; they reveal only
"ok" or which of five dependencies is unusable, never why. One exception says where to look: while
the newest policy files are refused, the last good set keeps deciding (so the gateway stays
ready) and `/ready` adds `detail.policies`: the directory, when, the refused files' version, the
version still active, and the refused problems' locations (`FILE:LINE`, at most
`MAX_READY_PROBLEMS`). Their messages, which may quote policy text, are only in the log and in
`GET /admin/v1/policies`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

import orjson
from aiohttp import web

from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.metrics import CONTENT_TYPE
from cedarberg.gateway.web.errors import error_body
from cedarberg.gateway.web.keys import LIFECYCLE, metrics, security, services
from cedarberg.gateway.web.route import Route

log = logging.getLogger("cedarberg.ready")

CHECK_TIMEOUT_SECONDS = 2.0
MAX_READY_PROBLEMS = 20


async def check_health(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


async def _usable(check: Awaitable[bool]) -> bool:
    """The check's verdict; False if it takes too long or fails in a way it did not expect (a
    driver's internal error on a connection the server just closed): /ready answers 503 then,
    never 500."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return await check
    except TimeoutError:
        return False
    except Exception as err:  # any failure of a dependency is "not ready"
        log.warning("readiness check failed: %s", type(err).__name__)
        return False


def _policy_detail(policies: PolicyEngine) -> dict[str, object] | None:
    """What /ready says of a refused policy set (None while the newest files are the active set)."""
    refused = policies.last_error
    if refused is None:
        return None
    locations = [f"{p.path}:{p.line}" if p.line else p.path for p in refused.problems]
    return {
        "state": "refused",
        "directory": str(policies.directory),
        "refused_at": refused.at.isoformat(),
        "refused_version": refused.version,
        "active_version": policies.version or None,
        "problem_count": len(locations),
        "problems": locations[:MAX_READY_PROBLEMS],
    }


async def check_readiness(request: web.Request) -> web.Response:
    svc, sec = services(request), security(request)
    store, kms, audit, limits = await asyncio.gather(
        _usable(svc.ctx.store.ping()),
        _usable(svc.ctx.sealer.keyring.healthy()),
        _usable(sec.audit.probe()),
        _usable(sec.limiter.check()),
    )
    checks = {
        name: "ok" if usable else "unavailable"
        for name, usable in (
            ("store", store),
            ("kms", kms),
            ("policies", bool(sec.policies.version)),
            ("audit", audit),
            ("rate_limits", limits),
        )
    }
    failing = [name for name, state in checks.items() if state != "ok"]
    if request.app[LIFECYCLE].draining:
        failing.insert(0, "shutting down")
    policies = _policy_detail(sec.policies)
    detail = {} if policies is None else {"detail": {"policies": policies}}
    if not failing:
        return web.Response(
            body=orjson.dumps({"status": "ready", "checks": checks, **detail}),
            content_type="application/json",
        )
    body = error_body(503, "ServiceUnavailableException", f"not ready: {', '.join(failing)}")
    return web.Response(
        status=503,
        body=orjson.dumps({**body, "status": "unavailable", "checks": checks, **detail}),
        content_type="application/json",
    )


async def read_metrics(request: web.Request) -> web.Response:
    # Off the event loop: in multiprocess mode this reads every worker's files.
    body = await asyncio.to_thread(metrics(request).exposition)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


ROUTES = [
    Route("GET", "/health", check_health, "checkHealth", advertised=False),
    Route("GET", "/ready", check_readiness, "checkReadiness", advertised=False),
    Route("GET", "/metrics", read_metrics, "readMetrics", advertised=False),
]
