"""Rate limits (gateway/ratelimit.py, GCRA) on memory storage and on a real redis-server on loopback."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio
from pydantic import ValidationError

from cedarberg.gateway.config.ratelimit import RateLimitSettings
from cedarberg.gateway.ratelimit import (
    MemoryGcra,
    OperationClass,
    RateLimiter,
    RateLimitUnavailableError,
    RetryAfter,
    client_key,
    limit_for,
)
from tests.support import redis as redis_support
from tests.support.ports import free_port


@pytest.fixture(scope="session")
def redis_server() -> Iterator[redis_support.RedisServer]:
    server = redis_support.get_server()
    yield server
    redis_support.stop_server()


def _redis_settings(server: redis_support.RedisServer, **limits: str) -> RateLimitSettings:
    # A fresh key prefix per test keeps tests independent without flushing the shared server.
    return RateLimitSettings(storage_uri=server.url, key_prefix=f"t-{uuid.uuid4().hex}", **limits)


@pytest.fixture(params=["memory", "redis"])
async def storage_settings(request: pytest.FixtureRequest) -> RateLimitSettings:
    """Base settings on each storage; tests add their limits with ``model_copy``."""
    if request.param == "memory":
        return RateLimitSettings()
    server: redis_support.RedisServer = request.getfixturevalue("redis_server")
    return _redis_settings(server)


async def _open(settings: RateLimitSettings) -> RateLimiter:
    limiter = RateLimiter.open(settings)
    assert await limiter.check()
    return limiter


@pytest.fixture
async def closing() -> AsyncIterator[list[RateLimiter]]:
    opened: list[RateLimiter] = []
    yield opened
    for limiter in opened:
        await limiter.aclose()


async def test_principal_limit_per_class(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    limiter = await _open(storage_settings.model_copy(update={"read": "3/minute", "write": "2/minute"}))
    closing.append(limiter)
    for _ in range(3):
        assert await limiter.hit_principal("alice", OperationClass.READ) is None
    over = await limiter.hit_principal("alice", "read")
    assert isinstance(over, RetryAfter)
    assert 1 <= over.seconds <= 60
    assert over.header_value == str(over.seconds)
    # Other classes and other principals have their own budgets.
    assert await limiter.hit_principal("alice", OperationClass.WRITE) is None
    assert await limiter.hit_principal("bob", OperationClass.READ) is None
    assert await limiter.hit_principal("alice", OperationClass.WRITE) is None
    assert await limiter.hit_principal("alice", OperationClass.WRITE) is not None


async def test_address_limit_and_ipv6_prefix(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    limiter = await _open(storage_settings.model_copy(update={"per_address": "2/minute"}))
    closing.append(limiter)
    assert await limiter.hit_address("10.0.0.1") is None
    assert await limiter.hit_address("::ffff:10.0.0.1") is None  # the same client, IPv4-mapped
    assert await limiter.hit_address("10.0.0.1") is not None
    assert await limiter.hit_address("10.0.0.2") is None
    # Addresses in one /64 share a budget; another /64 does not.
    assert await limiter.hit_address("2001:db8:1:2::1") is None
    assert await limiter.hit_address("2001:db8:1:2:ffff::9") is None
    assert await limiter.hit_address("2001:db8:1:2::77") is not None
    assert await limiter.hit_address("2001:db8:1:3::1") is None


def _flood_addresses(count: int, start: int = 0) -> list[str]:
    return [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(start, start + count)]


async def test_a_flood_of_distinct_clients_stays_within_the_key_bound() -> None:
    """Attack: 40x the bound of distinct addresses fail authentication. The keys held never pass
    the bound, the memory held stops growing with it, and the flood does not wash out the one
    address that spent its whole budget (it stays locked out)."""
    bound = 1000
    # Per hour: the guesser's lockout (one interval, 12 minutes) outlasts the flood on a loaded
    # machine; per minute it ended after 12 s, which a slow run of the flood took.
    limiter = RateLimiter(RateLimitSettings(auth_failures_per_address="5/hour"), max_keys=bound)
    memory = limiter.memory
    assert isinstance(memory, MemoryGcra)
    guesser = "192.0.2.66"
    for _ in range(5):
        assert await limiter.hit_auth_failure(guesser) is None
    assert await limiter.auth_failures_exceeded(guesser) is not None

    gc.collect()
    tracemalloc.start()
    try:
        highest = 0
        # 5x the bound also fills `client_key`'s cache (4096 addresses, bounded as well).
        for addr in _flood_addresses(5 * bound):
            assert await limiter.hit_auth_failure(addr) is None  # each one's first failure
            highest = max(highest, memory.key_count)
        gc.collect()
        after_five = tracemalloc.get_traced_memory()[0]
        for addr in _flood_addresses(35 * bound, start=5 * bound):
            await limiter.hit_auth_failure(addr)
            highest = max(highest, memory.key_count)
        gc.collect()
        after_forty = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert highest <= bound
    # The tables are rebuilt at each sweep: what is held depends on the bound, not the flood. The
    # 35,000 more keys would hold over 3 MB; at most one bound's worth of keys (here 1,000, each
    # under 256 bytes with its string) separates the two points of the sweep cycle measured.
    assert after_forty - after_five < bound * 256, (after_five, after_forty)
    retry = await limiter.auth_failures_exceeded(guesser)
    assert retry is not None
    assert 1 <= retry.seconds <= 720


async def test_memory_forgets_clients_back_to_a_full_budget() -> None:
    limiter = RateLimiter(RateLimitSettings(per_address="100/second"), max_keys=64)
    memory = limiter.memory
    assert isinstance(memory, MemoryGcra)
    busy = "192.0.2.1"
    for _ in range(100):
        assert await limiter.hit_address(busy) is None
    for addr in _flood_addresses(60):  # one hit each: back to a full budget 10 ms later
        assert await limiter.hit_address(addr) is None
    assert memory.key_count == 61
    await asyncio.sleep(0.05)
    for addr in _flood_addresses(10, start=1000):
        assert await limiter.hit_address(addr) is None
    # The sweep at 64 keys dropped the 60 idle clients, and only them: the busy one has won back
    # only the few hits of the time that passed, not the full budget of 100 a forgotten key has.
    assert memory.key_count == 1 + 10
    answers = [await limiter.hit_address(busy) for _ in range(30)]
    assert answers[-1] is not None


def test_client_key() -> None:
    assert client_key("127.0.0.1") == "127.0.0.1"
    assert client_key("::ffff:127.0.0.1") == "127.0.0.1"
    assert client_key("2001:db8::1") == "2001:db8::/64"
    assert client_key("2001:db8::1", 128) == "2001:db8::1/128"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key(None) == "unknown"
    assert client_key("/run/cedarberg.sock") == "/run/cedarberg.sock"


async def test_a_client_over_its_budget_recovers(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    limiter = await _open(storage_settings.model_copy(update={"per_address": "3/second"}))
    closing.append(limiter)
    for _ in range(3):
        assert await limiter.hit_address("127.0.0.1") is None
    over = await limiter.hit_address("127.0.0.1")
    assert over is not None
    assert over.seconds == 1
    # Denied hits consume nothing: the client is let in once a third of a second has passed.
    await asyncio.sleep(over.seconds)
    assert await limiter.hit_address("127.0.0.1") is None


async def test_retry_after_is_honest(storage_settings: RateLimitSettings, closing: list[RateLimiter]) -> None:
    """Attack: a burst over "4 per 8 seconds" (one every 2 s, bursts of 4) is refused with a
    Retry-After of 2; retrying a second early is refused again, retrying on time is admitted, and
    the burst does not come back: the next hit waits its 2 s."""
    limiter = await _open(storage_settings.model_copy(update={"per_address": "4 per 8 seconds"}))
    closing.append(limiter)
    for _ in range(4):
        assert await limiter.hit_address("198.51.100.9") is None
    over = await limiter.hit_address("198.51.100.9")
    assert over is not None
    assert over.seconds == 2
    assert over.limit == "4 per 8 second"
    denied_at = time.monotonic()
    await asyncio.sleep(over.seconds - 1)
    early = await limiter.hit_address("198.51.100.9")
    assert early is not None
    assert early.seconds == 1
    await asyncio.sleep(denied_at + over.seconds - time.monotonic())
    assert await limiter.hit_address("198.51.100.9") is None
    again = await limiter.hit_address("198.51.100.9")
    assert again is not None
    assert again.seconds == 2


async def test_traffic_at_the_budget_passes(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    """Control: a full burst, then one hit every interval ("4 per 2 seconds": every 0.5 s), is
    never refused."""
    limiter = await _open(storage_settings.model_copy(update={"read": "4 per 2 seconds"}))
    closing.append(limiter)
    for _ in range(4):
        assert await limiter.hit_principal("key:steady", OperationClass.READ) is None
    for _ in range(5):
        await asyncio.sleep(0.5)
        assert await limiter.hit_principal("key:steady", OperationClass.READ) is None


async def test_a_hit_denied_by_one_limit_consumes_nothing_of_the_others(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    """Hits refused by "1/second" must not spend "3/minute": if they did, the two refused here
    would have used the minute's budget and the hit a second later would be refused too."""
    limiter = await _open(storage_settings.model_copy(update={"write": "3/minute;1/second"}))
    closing.append(limiter)
    assert await limiter.hit_principal("key:w", OperationClass.WRITE) is None
    for _ in range(2):
        refused = await limiter.hit_principal("key:w", OperationClass.WRITE)
        assert refused is not None
        assert refused.limit == "1 per 1 second"
    await asyncio.sleep(1.05)
    assert await limiter.hit_principal("key:w", OperationClass.WRITE) is None


async def test_several_limits_in_one_string(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    limiter = await _open(storage_settings.model_copy(update={"token": "5/second;2/minute"}))
    closing.append(limiter)
    assert await limiter.hit_principal("svc", OperationClass.TOKEN) is None
    assert await limiter.hit_principal("svc", OperationClass.TOKEN) is None
    over = await limiter.hit_principal("svc", OperationClass.TOKEN)
    assert over is not None
    assert "minute" in over.limit
    assert over.seconds > 1


async def test_failed_authentication_limit_is_strict(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    limiter = await _open(storage_settings)  # default: 20 a minute
    closing.append(limiter)
    addr = "192.0.2.7"
    # Looking consumes nothing.
    for _ in range(50):
        assert await limiter.auth_failures_exceeded(addr) is None
    for _ in range(20):
        assert await limiter.auth_failures_exceeded(addr) is None
        assert await limiter.hit_auth_failure(addr) is None
    exceeded = await limiter.auth_failures_exceeded(addr)
    assert exceeded is not None
    assert exceeded.seconds == 3  # 20 a minute: the burst is spent, the next one comes in 3 s
    assert await limiter.hit_auth_failure(addr) is not None
    # Only that address is locked out, and only from authenticating: its request budget is separate.
    assert await limiter.auth_failures_exceeded("192.0.2.8") is None
    assert await limiter.hit_address(addr) is None


async def test_disabled_limits_nothing(closing: list[RateLimiter]) -> None:
    limiter = await _open(RateLimitSettings(enabled=False, auth_failures_per_address="1/hour"))
    closing.append(limiter)
    for _ in range(5):
        assert await limiter.hit_auth_failure("127.0.0.1") is None
        assert await limiter.auth_failures_exceeded("127.0.0.1") is None


async def test_two_limiters_share_one_redis_budget(
    redis_server: redis_support.RedisServer, closing: list[RateLimiter]
) -> None:
    settings = _redis_settings(redis_server, write="5/minute", auth_failures_per_address="3/minute")
    first, second = await _open(settings), await _open(settings)
    closing += [first, second]
    for _ in range(3):
        assert await first.hit_principal("carol", OperationClass.WRITE) is None
    assert await second.hit_principal("carol", OperationClass.WRITE) is None
    assert await second.hit_principal("carol", OperationClass.WRITE) is None
    assert await first.hit_principal("carol", OperationClass.WRITE) is not None
    assert await second.hit_principal("carol", OperationClass.WRITE) is not None
    # Failed authentications counted by one process lock the address out at the other.
    for limiter in (first, second, first):
        assert await limiter.hit_auth_failure("198.51.100.1") is None
    assert await second.auth_failures_exceeded("198.51.100.1") is not None
    # A limiter with another key prefix (another deployment) does not share the budget.
    other = await _open(settings.model_copy(update={"key_prefix": f"t-{uuid.uuid4().hex}"}))
    closing.append(other)
    assert await other.hit_principal("carol", OperationClass.WRITE) is None


async def test_redis_keys_expire_when_the_budget_is_full_again(
    redis_server: redis_support.RedisServer, closing: list[RateLimiter]
) -> None:
    """Redis holds one key per client and rate, each living only until its budget is full again
    (here: 3 hits of "10/second" are gone 0.3 s later), so a flood of clients does not pile up."""
    settings = _redis_settings(redis_server, per_address="10/second;1000/hour")
    limiter = await _open(settings)
    closing.append(limiter)
    for _ in range(3):
        assert await limiter.hit_address("203.0.113.5") is None
    client = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        keys = sorted(k.decode() for k in await client.keys(f"{settings.key_prefix}:*"))
        assert keys == [
            f"{settings.key_prefix}:gcra:address:203.0.113.5:10/1",
            f"{settings.key_prefix}:gcra:address:203.0.113.5:1000/3600",
        ]
        ttls = {k: await client.pttl(k) for k in keys}
        assert 0 < ttls[keys[0]] <= 300
        assert 0 < ttls[keys[1]] <= 3 * 3600  # ms: three intervals of 3.6 s
        await asyncio.sleep(0.4)
        assert await client.exists(keys[0]) == 0
    finally:
        await client.aclose()


async def test_redis_unreachable_fails_closed(closing: list[RateLimiter]) -> None:
    server = redis_support.RedisServer()
    server.start()
    try:
        limiter = await _open(RateLimitSettings(storage_uri=server.url, storage_timeout_seconds=0.5))
        closing.append(limiter)
        assert await limiter.hit_address("127.0.0.1") is None
    finally:
        server.stop()
    assert not await limiter.check()
    started = time.monotonic()
    with pytest.raises(RateLimitUnavailableError):
        await limiter.hit_address("127.0.0.1")
    with pytest.raises(RateLimitUnavailableError):
        await limiter.auth_failures_exceeded("127.0.0.1")
    with pytest.raises(RateLimitUnavailableError):
        await limiter.hit_principal("alice", OperationClass.READ)
    with pytest.raises(RateLimitUnavailableError):
        await limiter.hit_auth_failure("127.0.0.1")
    assert time.monotonic() - started < 10

    never = RateLimiter.open(RateLimitSettings(storage_uri=f"redis://127.0.0.1:{free_port()}"))
    closing.append(never)
    assert not await never.check()
    with pytest.raises(RateLimitUnavailableError):
        await never.hit_address("127.0.0.1")


async def test_redis_outage_is_logged_once_and_recovered_without_reopening(
    closing: list[RateLimiter], caplog: pytest.LogCaptureFixture
) -> None:
    """Attack: Redis stops under a limiter; the outage is logged once, however many requests it
    refuses, without the storage's address. Control: Redis back on the same port, the same limiter
    limits again and says so once."""
    server = redis_support.RedisServer()
    server.start()
    try:
        settings = RateLimitSettings(storage_uri=server.url, storage_timeout_seconds=0.5, write="2/minute")
        limiter = await _open(settings)
        closing.append(limiter)
        caplog.set_level("WARNING", logger="cedarberg.ratelimit")
        assert await limiter.hit_principal("alice", OperationClass.WRITE) is None
        assert not caplog.records  # nothing to say while it answers

        server.stop()
        for _ in range(3):
            with pytest.raises(RateLimitUnavailableError):
                await limiter.hit_principal("alice", OperationClass.WRITE)
        assert not await limiter.check()
        down = [r for r in caplog.records if "rate-limit storage unreachable" in r.getMessage()]
        assert len(down) == 1
        assert server.url not in down[0].getMessage()

        server.start()  # empty: alice's budget is full again
        assert await limiter.hit_principal("alice", OperationClass.WRITE) is None
        assert await limiter.hit_principal("alice", OperationClass.WRITE) is None
        assert await limiter.hit_principal("alice", OperationClass.WRITE) is not None
        assert sum("reachable again" in r.getMessage() for r in caplog.records) == 1
    finally:
        server.stop()


@pytest.mark.parametrize(
    "bad",
    [
        {"read": "lots"},
        {"write": ""},
        {"auth_failures_per_address": "20 per fortnight"},
        {"storage_uri": "memcached://127.0.0.1:11211"},
        {"storage_uri": "http://127.0.0.1:6379"},
        {"key_prefix": "has space"},
        {"storage_timeout_seconds": 0},
        {"unknown": 1},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RateLimitSettings.model_validate(bad)


def test_settings_are_frozen_and_accept_redis_uris() -> None:
    settings = RateLimitSettings(storage_uri="rediss://cache.internal:6380/2")
    with pytest.raises(ValidationError):
        settings.read = "1/second"  # type: ignore[misc]
    assert RateLimitSettings(storage_uri="redis+unix:///run/redis.sock").storage_uri.startswith("redis+unix")
    assert limit_for(settings, OperationClass.ADMIN) == settings.admin


async def test_an_unknown_operation_class_is_refused() -> None:
    limiter = RateLimiter.open(RateLimitSettings())
    with pytest.raises(ValueError, match="operation class"):
        await limiter.hit_principal("alice", "delete-everything")
