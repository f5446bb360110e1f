"""The security pipeline: its stages, in order (`STAGES`), and its two entry points.

request id and errors → limit by client address → replay a plan → route → record a plan →
authenticate → limit by principal → parse the body → authorize → handle. Each stage has one job
and hands the request on to the stages after it (`gateway.web.exchange`); the sequence is linked
once, at import, and asserted in full by the architecture test.

A worker's server enters the pipeline at its front, before aiohttp routes the request
(`gateway.web.front`, `run`); the `route` stage then hands the request to aiohttp's router, which
calls the one middleware, `pipeline`, with the route's handler, and the stages after routing run
there. A server without the front (e.g. aiohttp's test server) routes first and enters every stage
at the middleware. Routes are looked up in the one route table; an operation without an entry in
the authorization table cannot be registered (`gateway.web.app`), so nothing reaches a handler
undecided. Errors become responses through the one error table (`gateway.web.errors`). A console
route (`Route.session`) is authenticated by the browser's console session instead of by its
headers (`gateway.web.console.session_auth`); every other stage is the same.

A read may be recorded as a plan and replayed by the next identical request while everything it
was derived from is unchanged (`gateway.web.replay`): the `replay` stage answers it with the same
steps in the same order, the decided parts (principal, decisions, answer) taken from the plan.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from cedarberg.gateway.authn import credential_forms
from cedarberg.gateway.authn.errors import AuthenticationError, CredentialExpiredError, CredentialFormError
from cedarberg.gateway.authn.principal import AuthMethod, Principal
from cedarberg.gateway.authz.authorizer import filter_visible, plan_checks
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.operations import ActionGroup, OperationSpec, operation_spec
from cedarberg.gateway.logs import bind_principal
from cedarberg.gateway.ratelimit import OperationClass, RateLimitUnavailableError, RetryAfter, principal_key
from cedarberg.gateway.tls import peer_certificate_sha256, peer_subject
from cedarberg.gateway.web import errors, http, outcomes, replay, resources, verdicts
from cedarberg.gateway.web.answers import answer
from cedarberg.gateway.web.bodies import BODIES
from cedarberg.gateway.web.console import session_auth
from cedarberg.gateway.web.errors import ForbiddenError, RateLimitedError
from cedarberg.gateway.web.exchange import Exchange, Front, Next, Rest, Stage, chain
from cedarberg.gateway.web.keys import (
    EXCHANGE,
    PRINCIPAL,
    REFUSAL,
    ROUTE,
    VERDICT,
    request_id_of,
    route_of,
    services,
)
from cedarberg.gateway.web.route import Handler

if TYPE_CHECKING:
    from cedarberg.gateway.metrics import Metrics
    from cedarberg.gateway.web.security import Security

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


# The public probes (`gateway.web.routes.ops`) answer while the limiter's storage is unreachable,
# unlimited: a liveness probe answered 503 would have every instance restarted for a Redis blip,
# and /ready is what says the storage is down. They verify no credential and read no catalog
# data. Everything else, /metrics included (it verifies credentials), is refused with 503.
_SPARED = frozenset({"/health", "/ready"})


# -- the stages after `answer` (`gateway.web.answers`), in order ----------------------------------


async def limit_address(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Refuse (429) a client address over its rate limit, before anything else is looked at."""
    try:
        retry = await exchange.front.security.limiter.hit_address(request.remote)
    except RateLimitUnavailableError:
        if request.path not in _SPARED:
            raise
        retry = None
    if retry is not None:
        raise _rate_limited(request, exchange.front.metrics, retry, "address", "any")
    return await rest(request, exchange)


async def replay_plan(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Answer from the request's plan if it has a valid one: the failure budget and the principal's
    budget are checked and spent as for any request, the decisions audited and counted as
    recorded. Otherwise note the key a plan may be recorded under and go on."""
    front = exchange.front
    sec = front.security
    # A plan is looked up before routing: one exists only for a request that was decided before
    # on the same route (same method and path), of a replayable operation.
    key = sec.plans.key_of(request)
    if key is None:
        return await rest(request, exchange)
    plan = sec.plans.find(key, sec, front.store)
    if plan is None:
        exchange.plan_key = key
        return await rest(request, exchange)
    request[ROUTE] = plan.route
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


async def route(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Find the request's route and handler (aiohttp's router, which answers 404 and 405 itself);
    a public route goes straight to its handler, any other on to the stages after this one."""
    if exchange.router is not None:
        # Entered at the front: aiohttp routes the request and calls `pipeline`, which goes on
        # from here (`_routed`) with the handler it was given.
        exchange.after_route = rest
        request[EXCHANGE] = exchange
        return await exchange.router(request)
    return await _routed(request, exchange, rest)


async def _routed(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    routed = route_of(request)
    spec = None if routed is None else operation_spec(routed.operation)
    if spec is None or spec.public:
        return await exchange.handler(request)
    exchange.spec = spec
    return await rest(request, exchange)


async def record(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Record a replayable read as it is decided and answered (`gateway.web.replay`): its
    principal, decisions and answer become the plan the next identical request replays."""
    spec, key = _spec(exchange), exchange.plan_key
    if key is None or not spec.replayable:
        return await rest(request, exchange)
    rec = replay.Recording(_CLASSES[spec.group], route_of(request))
    with replay.recording(rec):
        try:
            response = await rest(request, exchange)
        except Exception as err:
            # Answered here so that a denial's answer is recorded too; answered once either way.
            response, _error_type = errors.answer(request, request_id_of(request) or "", err)
    rec.principal = request.get(PRINCIPAL)
    sec = exchange.front.security
    sec.plans.keep(key, rec, sec, response)
    return response


async def authenticate(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Establish the request's principal: from the console session on a console route (its
    cookie is the credential there, headers are not), else from its credential (`_principal`)."""
    spec, sec = _spec(exchange), exchange.front.security
    routed = route_of(request)
    if routed is not None and routed.session:
        bound = session_auth.MAX_FORM_BYTES if routed.form_bytes is None else routed.form_bytes(sec.settings)
        principal = await session_auth.authenticate(request, spec.operation, bound)
    else:
        principal = await _principal(request, exchange.front)
    request[PRINCIPAL] = principal
    # The log's principal is the audit record's: the namespaced id (`key:etl`).
    bind_principal(principal.id)
    return await rest(request, exchange)


async def limit_principal(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Refuse (429) a principal over its budget for the operation's class."""
    front, spec = exchange.front, _spec(exchange)
    who = principal_key(request[PRINCIPAL])
    await _spend_principal_budget(request, front.security, front.metrics, who, _CLASSES[spec.group])
    return await rest(request, exchange)


async def parse_body(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Parse the body once, before any decision: the resources and the context are built from the
    same typed objects the handler applies, and a malformed body is a 400 with nothing decided."""
    body = BODIES.get(_spec(exchange).operation)
    if body is not None:
        await http.parse_body(request, body.model, body.max_bytes)
    return await rest(request, exchange)


async def authorize(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Decide the request with Cedar on its canonical resources: anything but Allow is 403, or 404
    for what the caller may not see. A mutation goes on only once its decisions' records are
    durable (else AuditUnavailableError, 503)."""
    spec, sec = _spec(exchange), exchange.front.security
    principal = request[PRINCIPAL]
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
    exchange.resources, exchange.context = built, context
    if spec.group not in _READ_GROUPS:
        # Nothing changes unless its decisions are on record: the destination takes records and
        # has them (written, and synced per `audit.durability`); else 503, nothing done.
        await sec.audit.durable()
    return await rest(request, exchange)


async def handle(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
    """Run the handler (`rest`); filter a listing to what the caller may see; acknowledge a
    mutation only once its outcome's record is durable (else AuditUnavailableError, 503)."""
    spec, built, context = _spec(exchange), exchange.resources, exchange.context
    # Set by `authorize`, the stage before.
    assert built is not None
    assert context is not None
    response = await rest(request, exchange)
    principal = request[PRINCIPAL]
    if spec.lists is not None and isinstance(response, web.Response) and response.status == 200:
        response = await _filtered(request, exchange, response, principal, context)
    if spec.group not in _READ_GROUPS:
        resource = str(built.resource or ", ".join(map(str, built.tables)))
        await outcomes.acknowledge(request, spec.operation, principal, resource, response)
    return response


def _run_handler(request: web.Request, exchange: Exchange) -> Awaitable[web.StreamResponse]:
    # The chain's end: the handler's coroutine, awaited by `handle` (no frame of its own).
    return exchange.handler(request)


# The pipeline, outermost first. Rate limiting comes before authentication (a flood never reaches
# a token or hash check), authentication before authorization, authorization before the handler.
STAGES: tuple[Stage, ...] = (
    answer,
    limit_address,
    replay_plan,
    route,
    record,
    authenticate,
    limit_principal,
    parse_body,
    authorize,
    handle,
)
_PIPELINE = chain(STAGES, _run_handler)


def run(request: web.Request, front: Front, router: Rest) -> Awaitable[web.StreamResponse]:
    """The pipeline entered at the front (`gateway.web.front`), before routing: `router` is
    aiohttp's routing and middleware chain, which the `route` stage hands the request to. (A
    plain function: the chain's coroutine is awaited by the caller, with no frame of its own.)"""
    return _PIPELINE(request, Exchange(front, router))


@web.middleware
async def pipeline(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The pipeline after routing. Entered at the front, the stages before routing have run: go
    on after `route`. On a server without the front, run every stage here."""
    exchange = request.get(EXCHANGE)
    if exchange is not None and exchange.after_route is not None:
        exchange.handler = handler
        return await _routed(request, exchange, exchange.after_route)
    return await _PIPELINE(request, Exchange(Front.of(request.app), None, handler))


MIDDLEWARES = (pipeline,)


# -- what the stages share ------------------------------------------------------------------------


def _spec(exchange: Exchange) -> OperationSpec:
    spec = exchange.spec
    assert spec is not None  # the stages after `route` run for a routed, non-public operation only
    return spec


def _rate_limited(
    request: web.Request, stats: Metrics, retry: RetryAfter, scope: str, op_class: str
) -> RateLimitedError:
    stats.rate_limited.labels(scope, op_class).inc()
    request[REFUSAL] = _THROTTLE_REASONS[scope]
    return RateLimitedError(retry)


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


async def _principal(request: web.Request, front: Front) -> Principal:
    """The principal the request's credential proves. Raises AuthenticationError;
    CredentialFormError naming the expected form when an Authorization header is not
    `Bearer <token>` (even where anonymous access is configured: a credential sent wrong is
    refused, never ignored) or a bearer token is shaped as a client credential (decided on the
    shape only, after the failure, so it costs the accepted path nothing and says nothing about
    which keys exist)."""
    sec, stats = front.security, front.metrics
    credential = _credential(request)
    if credential is None:
        header = request.headers.get("Authorization", "").strip()
        if header:
            await _check_failure_budget(request, sec, stats)
            await sec.limiter.hit_auth_failure(request.remote)
            raise CredentialFormError(
                credential_forms.authorization_hint(header) or credential_forms.BEARER_FORM
            )
        if sec.anonymous is not None:
            return sec.anonymous
        request[REFUSAL] = "no credential"
        raise AuthenticationError()
    await _check_failure_budget(request, sec, stats)
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


async def _filtered(
    request: web.Request,
    exchange: Exchange,
    response: web.Response,
    principal: Principal,
    context: RequestContext,
) -> web.Response:
    """A listing keeps only what the caller may see (filtered, never denied)."""
    spec = _spec(exchange)
    body = response.body
    if not isinstance(body, bytes):
        return response
    document: dict[str, Any] = orjson.loads(body)
    children = await resources.visible_children(request, spec, services(request), document)
    policies = exchange.front.security.policies
    visible = {id(r) for r in filter_visible(policies, principal, context, children)}
    key = "namespaces" if spec.operation == "listNamespaces" else "identifiers"
    document[key] = [
        item for item, child in zip(document.get(key, []), children, strict=True) if id(child) in visible
    ]
    response.body = orjson.dumps(document)
    return response
