"""The rate limits over HTTP, in process: a burst over a budget is answered 429 with an honest
``Retry-After`` (retrying after it is admitted, retrying before it is not), and traffic at the
budget is never refused. (The limiter itself, on memory and on Redis: `tests/gateway/test_ratelimit.py`.)"""

from __future__ import annotations

import asyncio
import time

from tests.gateway.web.conftest import MakeGateway


async def test_a_burst_over_the_budget_gets_an_honest_retry_after(make_gateway: MakeGateway) -> None:
    """Attack: "4 per 8 seconds" per address is a burst of 4, then one request every 2 s."""
    gw = await make_gateway(config={"rate_limits": {"per_address": "4 per 8 seconds"}})
    assert [(await gw.client.get("/v1/config")).status for _ in range(4)] == [200] * 4
    limited = await gw.client.get("/v1/config")
    denied_at = time.monotonic()
    assert limited.status == 429, await limited.text()
    assert (await limited.json())["error"]["type"] == "TooManyRequestsException"
    retry_after = int(limited.headers["Retry-After"])
    assert retry_after == 2
    await asyncio.sleep(retry_after - 1)
    early = await gw.client.get("/v1/config")
    assert early.status == 429, "retrying before Retry-After is refused"
    assert int(early.headers["Retry-After"]) == 1
    await asyncio.sleep(denied_at + retry_after - time.monotonic())
    assert (await gw.client.get("/v1/config")).status == 200, "retrying after Retry-After is admitted"


async def test_traffic_at_the_budget_passes(make_gateway: MakeGateway) -> None:
    """Control: "4 per 2 seconds": a burst of 4, then a request every 0.5 s, all admitted."""
    gw = await make_gateway(config={"rate_limits": {"per_address": "4 per 2 seconds"}})
    statuses = [(await gw.client.get("/v1/config")).status for _ in range(4)]
    for _ in range(5):
        await asyncio.sleep(0.5)
        statuses.append((await gw.client.get("/v1/config")).status)
    assert statuses == [200] * 9
