"""Every typed key of the aiohttp application and of a request, and the accessors that read them.

What the application holds (set up once by `gateway.web.app`) and what a request carries
(written by the middlewares, read by the handlers) is declared here and nowhere else, as aiohttp
`AppKey`s and `RequestKey`s: a lookup is typed, and two modules cannot disagree on a string.

The types are imported for the type checker only: this module imports nothing of the gateway at
run time, so any module of `gateway.web` may import it without forming a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from pydantic import BaseModel

    from cedarberg.gateway.authn.principal import Principal
    from cedarberg.gateway.authz.authorizer import Verdict
    from cedarberg.gateway.metrics import Metrics
    from cedarberg.gateway.storage.access import StorageAccess
    from cedarberg.gateway.web.exchange import Exchange
    from cedarberg.gateway.web.route import Route
    from cedarberg.gateway.web.security import Security
    from cedarberg.gateway.web.services import Services


@dataclass(slots=True)
class Lifecycle:
    """Mutable state of the running application that the probes report."""

    draining: bool = False


# -- the application ----------------------------------------------------------------------------
SECURITY: web.AppKey[Security] = web.AppKey("security")
SERVICES: web.AppKey[Services] = web.AppKey("services")
STORAGE: web.AppKey[StorageAccess] = web.AppKey("storage")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
ACCESS_LOG = web.AppKey("access_log", bool)
ENDPOINTS = web.AppKey("endpoints", list[str])
# (method, canonical path) -> the route registered there.
ROUTE_TABLE: web.AppKey[dict[tuple[str, str], Route]] = web.AppKey("route_table")

# -- the request --------------------------------------------------------------------------------
REQUEST_ID = web.RequestKey("request_id", str)
# The route table's entry for the request, looked up once (None: no route matched).
ROUTE: web.RequestKey[Route | None] = web.RequestKey("route")
# The request's way through the pipeline's stages, while aiohttp routes a request that entered
# at the front: set by the `route` stage, read by the middleware that goes on from there.
EXCHANGE: web.RequestKey[Exchange] = web.RequestKey("exchange")
# Set by the pipeline on every authenticated request of a non-public route (or from its plan).
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal")
# An allowed request's verdict, for handlers that read more than "allowed" (the scan grants of
# planTableScan, the file-access checks).
VERDICT: web.RequestKey[Verdict] = web.RequestKey("verdict")
# Why the pipeline answered 401 or 429, for the aggregated audit record
# (`gateway.audit_refusals`): one of the pipeline's fixed reasons, never client text.
REFUSAL: web.RequestKey[str] = web.RequestKey("refusal")
# What the audit record of a mutation's outcome adds about the object the handler made (e.g. a
# created API key's id), when the decided resource cannot name it (`gateway.web.outcomes`).
AUDIT_DETAIL: web.RequestKey[dict[str, str]] = web.RequestKey("audit_detail")
# The body parsed once, before authorization (`gateway.web.http.parse_body`).
PARSED_BODY: web.RequestKey[BaseModel] = web.RequestKey("parsed_body")


def security(request: web.Request) -> Security:
    return request.app[SECURITY]


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


def storage(request: web.Request) -> StorageAccess:
    return request.app[STORAGE]


def metrics(request: web.Request) -> Metrics:
    return request.app[METRICS]


def route_of(request: web.Request) -> Route | None:
    """The request's entry in the route table (looked up once per request)."""
    try:
        return request[ROUTE]
    except KeyError:
        pass
    resource = request.match_info.route.resource
    route = None if resource is None else request.app[ROUTE_TABLE].get((request.method, resource.canonical))
    request[ROUTE] = route
    return route


def request_id_of(request: web.Request) -> str | None:
    """The request's id (as in `X-Request-ID`), for audit records."""
    return request.get(REQUEST_ID)
