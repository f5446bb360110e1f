"""Rate limits (gateway/ratelimit.py) on memory storage and on a real redis-server on loopback."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from limits import parse
from limits.aio.strategies import MovingWindowRateLimiter
from pydantic import ValidationError

from cedarberg.gateway.config.ratelimit import RateLimitSettings
from cedarberg.gateway.ratelimit import (
    LocalMovingWindowStorage,
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


async def test_memory_storage_forgets_idle_clients() -> None:
    storage = LocalMovingWindowStorage()
    strategy = MovingWindowRateLimiter(storage)
    item = parse("5/second")
    for i in range(200):
        assert await strategy.hit(item, f"client-{i}")
    assert storage.key_count == 200
    await asyncio.sleep(1.1)
    # Each hit sweeps a bounded batch of keys; a few hits later the idle ones are gone.
    for _ in range(5):
        assert await strategy.hit(item, "fresh")
    assert storage.key_count == 1
    assert not await strategy.hit(item, "fresh")
    assert await storage.reset() == 1


def test_client_key() -> None:
    assert client_key("127.0.0.1") == "127.0.0.1"
    assert client_key("::ffff:127.0.0.1") == "127.0.0.1"
    assert client_key("2001:db8::1") == "2001:db8::/64"
    assert client_key("2001:db8::1", 128) == "2001:db8::1/128"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key(None) == "unknown"
    assert client_key("/run/cedarberg.sock") == "/run/cedarberg.sock"


async def test_moving_window_recovers(
    storage_settings: RateLimitSettings, closing: list[RateLimiter]
) -> None:
    limiter = await _open(storage_settings.model_copy(update={"per_address": "3/second"}))
    closing.append(limiter)
    for _ in range(3):
        assert await limiter.hit_address("127.0.0.1") is None
    over = await limiter.hit_address("127.0.0.1")
    assert over is not None
    assert over.seconds == 1
    # Denied hits consume nothing: the client is let in once the oldest entry leaves the window.
    await asyncio.sleep(1.1)
    assert await limiter.hit_address("127.0.0.1") is None


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
    assert 50 <= exceeded.seconds <= 60
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
