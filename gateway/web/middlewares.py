"""The security pipeline: its first steps (`run`) and its routed steps, in one aiohttp middleware,
`pipeline`, the only thing in `MIDDLEWARES`.

request id and errors → limit by client address → (replay a plan, or:) route → authenticate
(→ limit by principal) → authorize → handler. A worker's server runs the first steps before
aiohttp routes the request (`gateway.web.front`); without the front, the middleware runs them.
Routes are looked up in the one route table; an operation without an entry in the authorization
table cannot be registered (`gateway.web.app`), so nothing reaches a handler undecided. Errors
become responses through the one error table (`gateway.web.errors`). A console route
(`Route.session`) is authenticated by the browser's console session instead of by its headers
(`gateway.web.console.session_auth`); every other step is the same.

A read may be recorded as a plan and replayed by the next identical request while everything it
was derived from is unchanged (`gateway.web.replay`): the replay runs the same steps in the same
order, with the decided parts (principal, decisions, answer) taken from the plan.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import itertools
import logging
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from cedarberg.gateway.authn import credential_forms
from cedarberg.gateway.authn.errors import AuthenticationError, CredentialExpiredError, CredentialFormError
from cedarberg.gateway.authn.principal import AuthMethod, Principal
from cedarberg.gateway.authz.authorizer import filter_visible, plan_checks
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.operations import ActionGroup, OperationSpec, operation_spec
from cedarberg.gateway.logs import bind_principal, bind_request
from cedarberg.gateway.ratelimit import OperationClass, RateLimitUnavailableError, RetryAfter
from cedarberg.gateway.tls import peer_certificate_sha256, peer_subject
from cedarberg.gateway.web import errors, http, outcomes, refusals, replay, resources, verdicts
from cedarberg.gateway.web.bodies import BODIES
from cedarberg.gateway.web.console import session_auth
from cedarberg.gateway.web.errors import ForbiddenError, RateLimitedError
from cedarberg.gateway.web.keys import (
    ACCESS_LOG,
    METRICS,
    PLAN_KEY,
    PRINCIPAL,
    REFUSAL,
    REQUEST_ID,
    ROUTE,
    SECURITY,
    SERVICES,
    VERDICT,
    metrics,
    request_id_of,
    route_of,
    security,
    services,
)
from cedarberg.gateway.web.route import Handler

if TYPE_CHECKING:
    from cedarberg.catalog.store.sql import Store
    from cedarberg.gateway.metrics import Metrics
    from cedarberg.gateway.web.security import Security

access_log = logging.getLogger("cedarberg.access")

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
# Metric labels stay bounded whatever clients send.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
_CONFLICT = "CommitFailedException"
_THROTTLE_REASONS = {
    "address": "client address over its rate limit",
    "auth_failures": "too many failed authentications from this address",
    "principal": "principal over its rate limit",
}

_CLASSES = {
    ActionGroup.READ: OperationClass.READ,
    ActionGroup.WRITE: OperationClass.WRITE,
    ActionGroup.MANAGE: OperationClass.WRITE,
    ActionGroup.ADMIN: OperationClass.ADMIN,
    ActionGroup.OPERATE: OperationClass.READ,
    ActionGroup.CONSOLE: OperationClass.READ,
    ActionGroup.PUBLIC: OperationClass.TOKEN,
}
# Reads (and the operator's reads): never audited as mutations.
_READ_GROUPS = frozenset({ActionGroup.READ, ActionGroup.OPERATE, ActionGroup.CONSOLE})


def _spec(request: web.Request) -> OperationSpec | None:
    route = route_of(request)
    return None if route is None else operation_spec(route.operation)


def _new_request_ids() -> Iterator[str]:
    """Unique request ids: 32 hex digits, a random per-process prefix and a counter (cheaper than
    a uuid4 per request, whose urandom call alone costs more than a cached authorization)."""
    prefix = secrets.token_hex(8)
    return (f"{prefix}{n:016x}" for n in itertools.count())


_request_ids = _new_request_ids()


def _restart_request_ids() -> None:
    global _request_ids  # noqa: PLW0603 - a forked worker starts a sequence of its own
    _request_ids = _new_request_ids()


# A forked worker must not repeat its parent's ids; asking for the pid on every request would
# cost a system call each time.
os.register_at_fork(after_in_child=_restart_request_ids)


def _new_request_id() -> str:
    return next(_request_ids)


@dataclass(frozen=True, slots=True)
class Front:
    """What the pipeline's first steps read from the application. They run before aiohttp has
    routed the request (`gateway.web.front`), when `request.app` is not known yet."""

    security: Security
    metrics: Metrics
    store: Store
    access_log: bool

    @classmethod
    def of(cls, app: web.Application) -> Front:
        return cls(app[SECURITY], app[METRICS], app[SERVICES].ctx.store, app[ACCESS_LOG])


Rest = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The public probes (`gateway.web.routes.ops`) answer while the limiter's storage is unreachable,
# unlimited: a liveness probe answered 503 would have every instance restarted for a Redis blip,
# and /ready is what says the storage is down. They verify no credential and read no catalog
# data. Everything else, /metrics included (it verifies credentials), is refused with 503.
_SPARED = frozenset({"/health", "/ready"})


@web.middleware
async def pipeline(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The pipeline's routed steps (authenticate, authorize, handle). Its first steps ran before
    routing when the server answers through `gateway.web.front` (the request has its id then);
    on a server without it (e.g. aiohttp's test server) they run here, first."""
    if REQUEST_ID in request:
        return await _routed(request, handler)
    return await run(request, Front.of(request.app), functools.partial(_routed, handler=handler))


async def run(request: web.Request, front: Front, rest: Rest) -> web.StreamResponse:
    """Give every request an id, limit it by client address, replay its plan if it has a valid
    one or else pass it on to `rest`, turn every exception into an Iceberg ErrorModel response,
    and count and log what was answered."""
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    request_id = offered if _CLIENT_REQUEST_ID.match(offered) else _new_request_id()
    request[REQUEST_ID] = request_id
    bind_request(request_id)
    started = time.perf_counter()
    error_type = None
    stats = front.metrics
    stats.in_flight.inc()
    try:
        response = await _limited_or_replayed(request, front, rest)
    except Exception as err:
        response, error_type = errors.answer(request, request_id, err)
    finally:
        stats.in_flight.dec()
    elapsed = time.perf_counter() - started
    response.headers[REQUEST_ID_HEADER] = request_id
    # Set by the routed steps (or from a plan); absent when routing itself failed.
    route = request.get(ROUTE)
    operation = route.operation if route is not None else "unmatched"
    method = request.method if request.method in _METHODS else "other"
    stats.child(stats.requests, operation, method, str(response.status)).inc()
    stats.child(stats.latency, operation).observe(elapsed)
    if error_type == _CONFLICT:
        stats.conflicts.labels(operation).inc()
    if response.status in refusals.AUDITED:  # one set lookup per request; a refusal costs more
        await refusals.note(request, front.security, response.status, operation)
    if front.access_log:
        access_log.info(
            "%s %s %d %.1fms", request.method, request.rel_url.raw_path, response.status, elapsed * 1000
        )
    return response


def _rate_limited(
    request: web.Request, stats: Metrics, retry: RetryAfter, scope: str, op_class: str
) -> RateLimitedError:
    stats.rate_limited.labels(scope, op_class).inc()
    request[REFUSAL] = _THROTTLE_REASONS[scope]
    return RateLimitedError(retry)


async def _limited_or_replayed(request: web.Request, front: Front, rest: Rest) -> web.StreamResponse:
    """Limit by address, then replay the request's plan if it has a valid one; else `rest`."""
    sec = front.security
    try:
        retry = await sec.limiter.hit_address(request.remote)
    except RateLimitUnavailableError:
        if request.path not in _SPARED:
            raise
        retry = None
    if retry is not None:
        raise _rate_limited(request, front.metrics, retry, "address", "any")
    # A plan is looked up before anything else: one exists only for a request that was decided
    # before on the same route (same method and path), of a replayable operation.
    key = sec.plans.key_of(request)
    if key is not None:
        plan = sec.plans.find(key, sec, front.store)
        if plan is not None:
            request[ROUTE] = plan.route
            return await _replayed(request, plan, front)
    request[PLAN_KEY] = key
    return await rest(request)


async def _routed(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unless the route is public, authenticate and authorize the request (recording a plan
    when it may have one) and run the handler."""
    spec = _spec(request)
    if spec is None or spec.public:
        return await handler(request)
    key = request.get(PLAN_KEY)
    if key is None or not spec.replayable:
        return await _decided(request, spec, handler)
    rec = replay.Recording(_CLASSES[spec.group], route_of(request))
    with replay.recording(rec):
        try:
            response = await _decided(request, spec, handler)
        except Exception as err:
            # Answered here so that a denial's answer is recorded too; answered once either way.
            response, _error_type = errors.answer(request, request_id_of(request) or "", err)
    rec.principal = request.get(PRINCIPAL)
    sec = security(request)
    sec.plans.keep(key, rec, sec, response)
    return response


async def _replayed(request: web.Request, plan: replay.Plan, front: Front) -> web.StreamResponse:
    """`_decided`'s steps with the plan's outcome: the failure budget and the principal's budget
    are checked and spent as for any request; the decisions are audited and counted as recorded."""
    sec = front.security
    if plan.principal.auth_method is not AuthMethod.ANONYMOUS:  # a credential was presented
        await _check_failure_budget(request, sec, front.metrics)
    request[PRINCIPAL] = plan.principal
    bind_principal(plan.principal.id)
    await _spend_principal_budget(request, sec, front.metrics, plan.budget_key, plan.op_class)
    request_id = request_id_of(request)
    for template in plan.audits:
        sec.audit.record_template(template, request_id)
    for counter in plan.metrics:
        counter.inc()
    return plan.answer(request.headers.get("If-None-Match"))


def _credential(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    api_key = request.headers.get("X-Api-Key", "").strip()
    return api_key or None


async def _check_failure_budget(request: web.Request, sec: Security, stats: Metrics) -> None:
    """Guessing is slow: past the failure budget, nothing is verified (no Argon2, no JWKS fetch)."""
    retry = await sec.limiter.auth_failures_exceeded(request.remote)
    if retry is not None:
        raise _rate_limited(request, stats, retry, "auth_failures", "any")


async def _spend_principal_budget(
    request: web.Request, sec: Security, stats: Metrics, who: str, op_class: OperationClass
) -> None:
    retry = await sec.limiter.hit_principal(who, op_class)
    if retry is not None:
        raise _rate_limited(request, stats, retry, "principal", op_class.value)


async def _authenticate(request: web.Request) -> Principal:
    """The request's principal. Raises AuthenticationError; CredentialFormError naming the expected
    form when an Authorization header is not `Bearer <token>` (even where anonymous access is
    configured: a credential sent wrong is refused, never ignored) or a bearer token is shaped
    as a client credential (decided on the shape only, after the failure, so it costs the
    accepted path nothing and says nothing about which keys exist)."""
    sec = security(request)
    credential = _credential(request)
    if credential is None:
        header = request.headers.get("Authorization", "").strip()
        if header:
            await _check_failure_budget(request, sec, metrics(request))
            await sec.limiter.hit_auth_failure(request.remote)
            raise CredentialFormError(
                credential_forms.authorization_hint(header) or credential_forms.BEARER_FORM
            )
        if sec.anonymous is not None:
            return sec.anonymous
        request[REFUSAL] = "no credential"
        raise AuthenticationError()
    await _check_failure_budget(request, sec, metrics(request))
    try:
        principal = await sec.bearer.authenticate(
            credential, request.remote, functools.partial(peer_certificate_sha256, request.transport)
        )
    except AuthenticationError as err:
        request[REFUSAL] = (
            "credential expired" if isinstance(err, CredentialExpiredError) else "credential refused"
        )
        await sec.limiter.hit_auth_failure(request.remote)
        hint = credential_forms.bearer_hint(credential) if type(err) is AuthenticationError else None
        if hint is not None:
            raise CredentialFormError(hint) from None
        raise
    subject = peer_subject(request.transport)
    if subject is not None:
        principal = dataclasses.replace(
            principal, attributes={**principal.attributes, "tls_subject": subject}
        )
    return principal


async def _decided(request: web.Request, spec: OperationSpec, handler: Handler) -> web.StreamResponse:
    """Authenticate, spend the principal's budget, authorize, run the handler; filter a listing
    to what the caller may see; audit a mutation's outcome. A mutation runs only once its
    decisions' records are durable and is acknowledged only once its outcome's record is;
    otherwise AuditUnavailableError (503)."""
    sec = security(request)
    route = route_of(request)
    if route is not None and route.session:
        # A console route: the session cookie is its credential, and headers are not.
        bound = session_auth.MAX_FORM_BYTES if route.form_bytes is None else route.form_bytes(sec.settings)
        principal = await session_auth.authenticate(request, spec.operation, bound)
    else:
        principal = await _authenticate(request)
    request[PRINCIPAL] = principal
    who = f"{principal.kind}:{principal.id}"
    # The log's principal is the audit record's: the namespaced id (`key:etl`).
    bind_principal(principal.id)
    await _spend_principal_budget(request, sec, metrics(request), who, _CLASSES[spec.group])
    body = BODIES.get(spec.operation)
    if body is not None:
        # One parse, before any decision: the resources and the context are built from the same
        # typed objects the handler applies, and a malformed body is a 400 with nothing decided.
        await http.parse_body(request, body.model, body.max_bytes)
    built = await resources.build(request, spec, services(request), sec)
    context = RequestContext.of(principal, request.remote or "", built.changes)
    checks = plan_checks(spec.operation, context, built.resource, target=built.target, tables=built.tables)
    verdict = verdicts.decide(request, spec.operation, checks, hides=True)
    if not verdict.allowed:
        hidden = verdicts.hidden_error(verdict)  # the status its audit record names
        if hidden is not None and verdict.hidden_kind is not None:
            raise hidden(f"{verdict.hidden_kind.value} does not exist")
        raise ForbiddenError(f"Not allowed: {spec.operation}")
    request[VERDICT] = verdict
    mutation = spec.group not in _READ_GROUPS
    if mutation:
        # Nothing changes unless its decisions are on record: the destination takes records and
        # has them (written, and synced per `audit.durability`); else 503, nothing done.
        await sec.audit.durable()
    response = await handler(request)
    if spec.lists is not None and isinstance(response, web.Response) and response.status == 200:
        response = await _filtered(request, spec, response, principal, context)
    if mutation:
        resource = str(built.resource or ", ".join(map(str, built.tables)))
        await outcomes.acknowledge(request, spec.operation, principal, resource, response)
    return response


async def _filtered(
    request: web.Request,
    spec: OperationSpec,
    response: web.Response,
    principal: Principal,
    context: RequestContext,
) -> web.Response:
    """A listing keeps only what the caller may see (filtered, never denied)."""
    body = response.body
    if not isinstance(body, bytes):
        return response
    document: dict[str, Any] = orjson.loads(body)
    children = await resources.visible_children(request, spec, services(request), document)
    visible = {id(r) for r in filter_visible(security(request).policies, principal, context, children)}
    key = "namespaces" if spec.operation == "listNamespaces" else "identifiers"
    document[key] = [
        item for item, child in zip(document.get(key, []), children, strict=True) if id(child) in visible
    ]
    response.body = orjson.dumps(document)
    return response


def basic_credentials(request: web.Request) -> tuple[str, str] | None:
    """HTTP Basic user and password, if sent."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except ValueError:
        return None
    return user, password


MIDDLEWARES = (pipeline,)
