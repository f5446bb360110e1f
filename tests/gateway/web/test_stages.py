"""The pipeline's stages at their boundaries: a request a stage refuses never reaches the stages
after it (counted: failed authentications, Cedar decisions, handler calls), and a request each
stage lets through does. The order itself is asserted in `tests/test_architecture.py`; how the
stages are linked (`gateway.web.exchange.chain`) is tested here."""

from __future__ import annotations

import re
from typing import cast

from aiohttp import web

from cedarberg.gateway.web.exchange import Exchange, Front, Next, Stage, chain
from cedarberg.gateway.web.keys import METRICS, SECURITY
from cedarberg.gateway.web.route import Route
from tests.gateway.web.conftest import InProcessGateway, MakeGateway

_BAD_KEY = {"Authorization": "Bearer cbk_aaaaaaaaaaaaaaaa_" + "A" * 43}
# The address every test client connects from.
_LOOPBACK = "127.0.0.1"


def _samples(gw: InProcessGateway, family: str) -> dict[str, float]:
    """`{labels: value}` of one Prometheus family's samples, from the application's metrics."""
    found = {}
    for line in gw.app[METRICS].exposition().decode().splitlines():
        match = re.match(rf"^{family}\{{(.*)\}} (\S+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def _decisions(gw: InProcessGateway) -> float:
    """How many Cedar decisions the application has made (the `authorize` stage's count)."""
    return sum(_samples(gw, "cedarberg_authz_decisions_total").values())


# -- how the stages are linked ---------------------------------------------------------------------


def _stage(name: str, ran: list[str], answers: bool = False) -> Stage:
    async def run(request: web.Request, exchange: Exchange, rest: Next) -> web.StreamResponse:
        ran.append(name)
        if answers:
            return web.Response(text=name)
        return await rest(request, exchange)

    return run


async def test_a_chain_runs_its_stages_in_order_until_one_answers(gw: InProcessGateway) -> None:
    ran: list[str] = []

    async def last(_request: web.Request, _exchange: Exchange) -> web.StreamResponse:
        ran.append("last")
        return web.Response(text="last")

    exchange = Exchange(Front.of(gw.app), None)
    request = cast(web.Request, object())  # the chain hands it on and never reads it
    through = await chain([_stage("a", ran), _stage("b", ran), _stage("c", ran)], last)(request, exchange)
    assert (ran, cast(web.Response, through).text) == (["a", "b", "c", "last"], "last")
    ran.clear()
    stopped = chain([_stage("a", ran), _stage("b", ran, answers=True), _stage("c", ran)], last)
    answered = await stopped(request, exchange)
    assert (ran, cast(web.Response, answered).text) == (["a", "b"], "b")


# -- limit_address before authenticate -------------------------------------------------------------


async def test_a_request_over_the_address_limit_is_never_authenticated(make_gateway: MakeGateway) -> None:
    """One request in a minute from the address: the four after it carry the same bad credential
    and are refused 429 before authentication, so only the first failed authentication is on the
    address's failure budget (two allowed: it is not exhausted)."""
    limits = {"per_address": "1/minute", "auth_failures_per_address": "2/minute"}
    gw = await make_gateway(anonymous=False, config={"rate_limits": limits})
    statuses = [(await gw.client.get("/v1/namespaces", headers=_BAD_KEY)).status for _ in range(5)]
    assert statuses == [401, 429, 429, 429, 429]
    limiter = gw.app[SECURITY].limiter
    assert await limiter.auth_failures_exceeded(_LOOPBACK) is None
    await limiter.hit_auth_failure(_LOOPBACK)  # the second failure the budget allows
    assert await limiter.auth_failures_exceeded(_LOOPBACK) is not None
    assert _samples(gw, "cedarberg_rate_limit_rejections_total") == {'op_class="any",scope="address"': 4.0}


# -- authenticate before authorize -----------------------------------------------------------------


async def test_a_request_authentication_refuses_is_never_authorized(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(anonymous=False)
    assert (await gw.client.get("/v1/namespaces", headers=_BAD_KEY)).status == 401
    assert (await gw.client.get("/v1/namespaces")).status == 401  # no credential at all
    basic = {"Authorization": "Basic cm9vdDpwdw=="}  # a credential in a form the gateway refuses
    assert (await gw.client.get("/v1/namespaces", headers=basic)).status == 401
    assert _decisions(gw) == 0
    # Control: the same request with a valid key is decided.
    assert (await gw.client.get("/v1/namespaces", headers=gw.as_("root"))).status == 200
    assert _decisions(gw) == 1


# -- limit_principal before authorize --------------------------------------------------------------


async def test_a_principal_over_its_budget_is_never_authorized(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(anonymous=False, config={"rate_limits": {"read": "2/minute"}})
    statuses = [(await gw.client.get("/v1/namespaces", headers=gw.as_("ana"))).status for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert _decisions(gw) == 2
    assert _samples(gw, "cedarberg_rate_limit_rejections_total") == {'op_class="read",scope="principal"': 1.0}
    # Another principal's budget is its own: decided.
    assert (await gw.client.get("/v1/namespaces", headers=gw.as_("root"))).status == 200
    assert _decisions(gw) == 3


# -- authorize before handle -----------------------------------------------------------------------


async def test_a_request_authorization_refuses_never_reaches_its_handler(make_gateway: MakeGateway) -> None:
    calls: list[str] = []

    async def count(request: web.Request) -> web.StreamResponse:
        calls.append(request.path)
        return web.json_response({})

    probe = Route("POST", "/v1/probe-namespaces", count, "createNamespace")
    gw = await make_gateway(anonymous=False, extra_routes=[probe])
    body = {"namespace": ["probed"]}
    refused = await gw.client.post("/v1/probe-namespaces", json=body, headers=gw.as_("nobody"))
    assert refused.status == 403, await refused.text()
    assert (calls, _decisions(gw)) == ([], 1)
    # Control: an allowed caller's request reaches the handler, once.
    allowed = await gw.client.post("/v1/probe-namespaces", json=body, headers=gw.as_("root"))
    assert allowed.status == 200, await allowed.text()
    assert calls == ["/v1/probe-namespaces"]
