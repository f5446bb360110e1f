"""Rate limits: per client address before authentication, per principal after it.

Built on `limits` with the moving-window strategy (no burst at window edges). Storage is process
memory by default (`LocalMovingWindowStorage`, a lean replacement for `limits`' own async memory
storage); a ``redis://`` (or ``rediss://``, ``redis+unix://``) URI puts the windows in Redis so
several gateway processes share one budget. Redis is driven through redis-py's asyncio client
(`limits[redis]`) with `limits`' Lua scripts, so no extra async driver is needed. The moving window
stamps entries with each process's clock: gateway hosts sharing a Redis need synchronised clocks.

Budgets are keyed by the strings the caller passes: principal ids are unique only within their
kind, so pass e.g. ``f"{principal.kind}:{principal.id}"`` when kinds may share ids.

Public API::

    limiter = RateLimiter.open(settings)                  # does not connect yet
    await limiter.check()                                 # readiness: storage reachable?
    await limiter.auth_failures_exceeded(addr)            # before any expensive authentication
    await limiter.hit_address(addr)                       # every request, before authentication
    await limiter.hit_principal(principal_id, op_class)   # after authentication
    await limiter.hit_auth_failure(addr)                  # after a failed authentication
    await limiter.aclose()

Each ``hit_*``/``*_exceeded`` returns ``None`` when the request may go on, or a `RetryAfter` whose
``seconds`` go into the ``Retry-After`` header of the 429 answer.

Invariants:

- **Fail closed.** If the storage cannot be reached (Redis down, timeout), every call raises
  `RateLimitUnavailableError` (to be answered 503) instead of letting traffic through unlimited:
  a limiter that silently stops limiting would turn a Redis outage into an open door for
  password/key guessing. Calls are bounded by ``storage_timeout_seconds``.
- **Failed authentications are limited strictly**, per client address, in their own window
  (default 20 a minute): `auth_failures_exceeded` only looks (it consumes nothing), so a caller
  over the limit is turned away before any token or hash is checked.
- IPv6 clients are limited per network prefix (default /64), since one host usually owns a whole
  /64 and could otherwise rotate addresses; IPv4-mapped IPv6 addresses count as their IPv4.
- A denied hit consumes nothing (moving window), so a client that keeps hammering is let in again
  as soon as its window has room, and the ``Retry-After`` it gets is when that will be.

Raises: `RateLimitUnavailableError` (storage failure); `pydantic.ValidationError` for bad settings.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from limits import RateLimitItem, parse_many
from limits.aio.storage import MovingWindowSupport, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from limits.errors import StorageError

from cedarberg.gateway.config.ratelimit import RateLimitSettings

__all__ = [
    "OperationClass",
    "RateLimitUnavailableError",
    "LocalMovingWindowStorage",
    "RateLimiter",
    "RetryAfter",
    "client_key",
    "limit_for",
]


class OperationClass(StrEnum):
    """The operation classes a principal's budget is split into (the route table assigns one)."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    TOKEN = "token"  # noqa: S105 - an operation class, not a credential


class RateLimitUnavailableError(Exception):
    """The rate-limit storage could not be reached or answered in time: deny with 503."""


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """A limit was hit; the client may retry after ``seconds`` (>= 1, for ``Retry-After``)."""

    seconds: int
    limit: str  # which limit, e.g. "20 per 1 minute", for the log (never for the client)

    @property
    def header_value(self) -> str:
        return str(self.seconds)


def limit_for(settings: RateLimitSettings, op_class: OperationClass) -> str:
    """The limit of ``settings`` that applies to a principal's operations of ``op_class``."""
    return {
        OperationClass.READ: settings.read,
        OperationClass.WRITE: settings.write,
        OperationClass.ADMIN: settings.admin,
        OperationClass.TOKEN: settings.token,
    }[op_class]


@functools.lru_cache(maxsize=4096)
def client_key(addr: str | None, ipv6_prefix_length: int = 64) -> str:
    """The identity an address is limited under: the IPv4 address, the IPv6 network of the
    configured prefix, or the string itself when it is not an IP address (e.g. a unix socket)."""
    if not addr:
        return "unknown"
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, ipv6_prefix_length), strict=False))
    return str(ip)


class LocalMovingWindowStorage(Storage, MovingWindowSupport):
    """Moving windows in this process's memory, for `limits`' moving-window strategy.

    Replaces `limits.aio.storage.MemoryStorage`, whose expiry task walks every key with a thread
    hop per key after each hit (measured here: ~300 µs of CPU per hit). Here each key holds a deque
    of hit times, pruned as it is used; keys that went idle are dropped by an incremental sweep
    (at most ``_SWEEP_BATCH`` keys per hit, a full pass at most once a second), so no call does
    more than bounded work. Only the moving window is supported. Event-loop confined: no locks
    are needed because nothing awaits between reading and updating a window.
    """

    STORAGE_SCHEME = None  # not reachable by URI; RateLimiter.open picks it for memory://
    _SWEEP_BATCH = 64

    def __init__(self) -> None:
        super().__init__(None, wrap_exceptions=True)
        self._events: dict[str, deque[float]] = {}
        self._expiry: dict[str, int] = {}
        self._sweep_pending: deque[str] = deque()
        self._next_pass = 0.0

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return ()

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.acquire_now(key, limit, expiry, amount)

    def acquire_now(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """`acquire_entry` without the coroutine (the limiter's hot path calls it directly)."""
        now = time.time()
        self._sweep(now)
        if amount > limit:
            return False
        events = self._window(key, expiry, now)
        if events is None:
            events = self._events[key] = deque()
            self._expiry[key] = expiry
        if len(events) + amount > limit:
            return False
        events.extend([now] * amount)
        return True

    def has_room(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """Whether `amount` more hits fit in the window now (consumes nothing; `limits`' test)."""
        events = self._window(key, expiry, time.time())
        return (len(events) if events else 0) + amount <= limit

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        now = time.time()
        events = self._window(key, expiry, now)
        if not events:
            return now, 0
        return events[0], len(events)

    def _window(self, key: str, expiry: int, now: float) -> deque[float] | None:
        events = self._events.get(key)
        if events is not None:
            cutoff = now - expiry
            while events and events[0] <= cutoff:
                events.popleft()
        return events

    def _sweep(self, now: float) -> None:
        if not self._sweep_pending:
            if now < self._next_pass:
                return
            self._sweep_pending.extend(self._events)
            self._next_pass = now + 1.0
        for _ in range(min(self._SWEEP_BATCH, len(self._sweep_pending))):
            key = self._sweep_pending.popleft()
            events = self._events.get(key)
            if events is not None and (not events or events[-1] <= now - self._expiry[key]):
                del self._events[key]
                del self._expiry[key]

    @property
    def key_count(self) -> int:
        return len(self._events)

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        raise NotImplementedError("only the moving window is supported")

    async def get(self, key: str) -> int:
        raise NotImplementedError("only the moving window is supported")

    async def get_expiry(self, key: str) -> float:
        raise NotImplementedError("only the moving window is supported")

    async def check(self) -> bool:
        return True

    async def reset(self) -> int | None:
        count = len(self._events)
        self._events.clear()
        self._expiry.clear()
        self._sweep_pending.clear()
        return count

    async def clear(self, key: str) -> None:
        self._events.pop(key, None)
        self._expiry.pop(key, None)


@functools.lru_cache(maxsize=4096)
def _window_key(item: RateLimitItem, ident: tuple[str, ...]) -> str:
    """The storage key of a window: `limits`' own key, built once per (limit, identity)."""
    return item.key_for(*ident)


class RateLimiter:
    """Moving-window limits over one storage. Create with `open`; close with `aclose`."""

    def __init__(self, settings: RateLimitSettings, storage: Storage, pool: Any = None) -> None:
        self._settings = settings
        self._storage = storage
        self._pool = pool  # redis.asyncio.ConnectionPool we own, or None
        self._remote = pool is not None
        self._failures: tuple[type[BaseException], ...] = (StorageError, OSError)
        if self._remote:
            import redis.exceptions

            # Belt and braces: any driver error limits leaves unwrapped still fails closed.
            self._failures += (redis.exceptions.RedisError,)
        self._strategy = MovingWindowRateLimiter(storage)
        self._local = storage if isinstance(storage, LocalMovingWindowStorage) else None
        self._address_items = parse_many(settings.per_address)
        self._auth_failure_items = parse_many(settings.auth_failures_per_address)
        self._class_items = {c: parse_many(limit_for(settings, c)) for c in OperationClass}

    @classmethod
    def open(cls, settings: RateLimitSettings) -> RateLimiter:
        """Build a limiter for ``settings``. Nothing is connected yet (Redis connects lazily, on
        the event loop of the first call, which must be the loop that keeps using it); call
        `check` to find out whether the storage answers."""
        scheme = urlsplit(settings.storage_uri).scheme
        if scheme == "memory":
            return cls(settings, LocalMovingWindowStorage())
        import redis.asyncio

        pool = redis.asyncio.ConnectionPool.from_url(
            settings.storage_uri,
            socket_timeout=settings.storage_timeout_seconds,
            socket_connect_timeout=settings.storage_timeout_seconds,
            health_check_interval=30,
        )
        # limits types its pass-through options as scalars; the pool is handed on to redis-py.
        options: dict[str, Any] = {"connection_pool": pool}
        storage = RedisStorage(
            "async+" + settings.storage_uri,
            implementation="redispy",
            wrap_exceptions=True,
            key_prefix=settings.key_prefix,
            **options,
        )
        return cls(settings, storage, pool)

    @property
    def settings(self) -> RateLimitSettings:
        return self._settings

    async def aclose(self) -> None:
        """Release the storage's connections (idempotent)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()

    async def check(self) -> bool:
        """Whether the storage answers now (for readiness); never raises."""
        try:
            async with asyncio.timeout(self._settings.storage_timeout_seconds):
                return bool(await self._storage.check())
        except self._failures:  # builtin TimeoutError is an OSError
            return False

    # -- the checks ---------------------------------------------------------------------------

    async def hit_address(self, addr: str | None) -> RetryAfter | None:
        """Count one request from ``addr`` (before authentication)."""
        return await self._hit(self._address_items, "address", self.client(addr))

    async def hit_principal(self, principal_id: str, op_class: OperationClass | str) -> RetryAfter | None:
        """Count one ``op_class`` operation by an authenticated principal."""
        op = OperationClass(op_class)
        return await self._hit(self._class_items[op], "principal", op.value, principal_id)

    async def hit_auth_failure(self, addr: str | None) -> RetryAfter | None:
        """Count one failed authentication from ``addr``; a `RetryAfter` once the limit is reached."""
        return await self._hit(self._auth_failure_items, "authfail", self.client(addr))

    async def auth_failures_exceeded(self, addr: str | None) -> RetryAfter | None:
        """Whether ``addr`` has used up its failed-authentication budget. Consumes nothing: call
        it before any expensive authentication work and turn the request away if it is not None."""
        if not self._settings.enabled:
            return None
        ident = ("authfail", self.client(addr))
        local = self._local
        if local is not None:
            for item in self._auth_failure_items:
                if not local.has_room(_window_key(item, ident), item.amount, item.get_expiry()):
                    return await self._retry_after(item, ident)
            return None
        async with self._guard():
            for item in self._auth_failure_items:
                if not await self._strategy.test(item, *ident):
                    return await self._retry_after(item, ident)
        return None

    # -- internals ----------------------------------------------------------------------------

    def client(self, addr: str | None) -> str:
        """The identity `addr` is limited under (see `client_key`); API key lockouts use it too."""
        return client_key(addr, self._settings.ipv6_prefix_length)

    async def _hit(self, items: list[RateLimitItem], *ident: str) -> RetryAfter | None:
        if not self._settings.enabled:
            return None
        local = self._local
        if local is not None:  # in memory: no I/O, no guard, no coroutine per window
            for item in items:
                if not local.acquire_now(_window_key(item, ident), item.amount, item.get_expiry()):
                    return await self._retry_after(item, ident)
            return None
        async with self._guard():
            for item in items:
                if not await self._strategy.hit(item, *ident):
                    return await self._retry_after(item, ident)
        return None

    async def _retry_after(self, item: RateLimitItem, ident: tuple[str, ...]) -> RetryAfter:
        # The window has room again once its oldest entry leaves it.
        stats = await self._strategy.get_window_stats(item, *ident)
        seconds = max(1, math.ceil(stats.reset_time - time.time()))
        return RetryAfter(seconds=min(seconds, item.get_expiry()), limit=str(item))

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        """Bound a storage round trip in time; turn every storage failure into
        `RateLimitUnavailableError` (fail closed). Memory storage does no I/O: no timer needed."""
        if not self._remote:
            yield
            return
        try:
            # Connect + script load + a few round trips, each bounded by the socket timeout.
            async with asyncio.timeout(self._settings.storage_timeout_seconds * 3):
                yield
        except self._failures as err:  # builtin TimeoutError is an OSError
            raise RateLimitUnavailableError("rate-limit storage unavailable") from err
