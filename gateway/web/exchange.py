"""What a request carries through the pipeline's stages, and how the stages are chained.

A stage is one async function `stage(request, exchange, rest)` with one job: it does its job and
hands the request on by awaiting `rest(request, exchange)` (the stages after it), or answers
without it (a refusal raises; a replayed plan or a public route answers). `chain` links a
sequence of stages once, at import, into one callable; a request then costs one plain call per
stage beyond the stages themselves (no allocation, no coroutine of its own). The sequence itself
is `gateway.web.middlewares.STAGES`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from cedarberg.gateway.web.keys import ACCESS_LOG, METRICS, SECURITY, SERVICES
from cedarberg.gateway.web.route import Handler

if TYPE_CHECKING:
    from cedarberg.catalog.store.pool import Store
    from cedarberg.gateway.authz.context import RequestContext
    from cedarberg.gateway.authz.operations import OperationSpec
    from cedarberg.gateway.metrics import Metrics
    from cedarberg.gateway.web.replay import PlanKey
    from cedarberg.gateway.web.resources import RequestResources
    from cedarberg.gateway.web.security import Security

# aiohttp's routing and middleware chain, as the front finds it on the server.
Rest = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Front:
    """What the pipeline's first stages read from the application. They run before aiohttp has
    routed the request (`gateway.web.front`), when `request.app` is not known yet."""

    security: Security
    metrics: Metrics
    store: Store
    access_log: bool

    @classmethod
    def of(cls, app: web.Application) -> Front:
        return cls(app[SECURITY], app[METRICS], app[SERVICES].ctx.store, app[ACCESS_LOG])


async def _not_routed(request: web.Request) -> web.StreamResponse:
    raise RuntimeError("a stage after routing ran before the request was routed")


class Exchange:
    """One request's way through the stages: what a stage learns and the stages after it use.

    `front` is the application's parts; `router` is aiohttp's routing and middleware chain when
    the request entered at the front (None: aiohttp routed it before the pipeline began);
    `handler` is the route's handler once routed, and `after_route` the stages after routing
    while aiohttp routes. The rest is set by the stage named beside it."""

    __slots__ = ("after_route", "context", "front", "handler", "plan_key", "resources", "router", "spec")

    def __init__(self, front: Front, router: Rest | None, handler: Handler = _not_routed) -> None:
        self.front = front
        self.router = router
        self.handler = handler
        self.after_route: Next | None = None
        self.plan_key: PlanKey | None = None  # replay: the key its plan is kept under, if any
        self.spec: OperationSpec | None = None  # route: the operation, unless public
        self.resources: RequestResources | None = None  # authorize: what was decided on
        self.context: RequestContext | None = None  # authorize: the Cedar context decided in


Next = Callable[[web.Request, Exchange], Awaitable[web.StreamResponse]]
Stage = Callable[[web.Request, Exchange, Next], Awaitable[web.StreamResponse]]


def chain(stages: Sequence[Stage], last: Next) -> Next:
    """`stages`, in order, as one callable ending in `last`: each stage is given the rest of
    the chain as its `rest`."""
    rest = last
    for stage in reversed(stages):
        rest = _link(stage, rest)
    return rest


def _link(stage: Stage, rest: Next) -> Next:
    # A plain function handing back the stage's coroutine: no coroutine frame of its own.
    def linked(request: web.Request, exchange: Exchange) -> Awaitable[web.StreamResponse]:
        return stage(request, exchange, rest)

    return linked
