"""Rate limits: per client address before authentication, per principal after it.

**Algorithm: GCRA** (the generic cell rate algorithm, a "virtual scheduling" token bucket). A limit
"N per period" has an emission interval ``I = period / N``; each key keeps one number, its
*theoretical arrival time* (TAT). A hit at ``now`` is admitted when ``max(TAT, now) + I - now <=
period``, and then moves the TAT to ``max(TAT, now) + I``. So a client with a full budget may send
a burst of N at once, and then one hit every ``I`` (N per period, steady); in any stretch of ``t``
seconds at most ``N + t / I`` hits pass. A denied hit changes nothing, and the wait until the next
hit is admitted is exact: ``max(TAT, now) + I - period - now`` (that is the ``Retry-After``).

Why GCRA, not `limits`' moving window (used before) nor its sliding-window counter: the moving
window keeps every hit of the last period (at 100M/minute, unbounded memory) and cost ~6 µs a
hit; the sliding-window counter keeps two counters per key but approximates (it assumes the
previous window's hits were spread evenly), so its ``Retry-After`` is an estimate and a client can
be refused after the time it was told. GCRA keeps one float per key, costs a dict lookup and a
few float operations per hit, gives an exact ``Retry-After``, and a key whose TAT is in the past
is back to a full budget and can be forgotten, which bounds memory by time as well as by count.

Storage is process memory by default (`MemoryGcra`, keyed with `time.monotonic`); a ``redis://``
(or ``rediss://``, ``redis+unix://``) URI keeps the TATs in Redis (Redis >= 5) so several gateway
processes share one budget. There the same algorithm runs as one Lua script per hit, on Redis's
own clock (``TIME``), so gateway hosts need no synchronised clocks; each key expires when its
budget is full again.

Budgets are keyed by the strings the caller passes; a principal's budget is keyed by
`principal_key`, the one place that key is built.

Public API::

    limiter = RateLimiter.open(settings)                  # does not connect yet
    await limiter.check()                                 # readiness: storage reachable?
    await limiter.auth_failures_exceeded(addr)            # before any expensive authentication
    await limiter.hit_address(addr)                       # every request, before authentication
    await limiter.hit_principal(principal_key(principal), op_class)   # after authentication
    await limiter.hit_auth_failure(addr)                  # after a failed authentication
    await limiter.aclose()

Each ``hit_*``/``*_exceeded`` returns ``None`` when the request may go on, or a `RetryAfter` whose
``seconds`` go into the ``Retry-After`` header of the 429 answer.

Invariants:

- **Fail closed.** If the storage cannot be reached (Redis down, timeout), every call raises
  `RateLimitUnavailableError` (to be answered 503) instead of letting traffic through unlimited:
  a limiter that silently stops limiting would turn a Redis outage into an open door for
  password/key guessing. Calls are bounded by ``storage_timeout_seconds``. The first failure
  after a success is logged (a warning), and so is the first success after a failure (the
  limiter recovers by itself: every call tries the storage).
- **Failed authentications are limited strictly**, per client address, with their own budget
  (default 20 a minute: a burst of 20, then one every 3 s): `auth_failures_exceeded` only looks
  (it consumes nothing), so a caller over the limit is turned away before any token or hash is
  checked.
- IPv6 clients are limited per network prefix (default /64), since one host usually owns a whole
  /64 and could otherwise rotate addresses; IPv4-mapped IPv6 addresses count as their IPv4.
- **A denied hit consumes nothing**, and a hit under several limits (``"5/second;100/minute"``)
  is admitted by all of them or by none, atomically: a client that keeps hammering is let in as
  soon as every limit has room, and the ``Retry-After`` it gets is when that will be.
- **Memory is bounded.** `MemoryGcra` holds at most ``max_keys`` keys (see its docstring).

Raises: `RateLimitUnavailableError` (storage failure); `pydantic.ValidationError` for bad settings.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import math
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from limits import parse_many

from cedarberg.gateway.config.ratelimit import RateLimitSettings

if TYPE_CHECKING:
    import redis.asyncio

    from cedarberg.gateway.authn.principal import Principal

__all__ = [
    "MemoryGcra",
    "OperationClass",
    "Rate",
    "RateLimitUnavailableError",
    "RateLimiter",
    "RetryAfter",
    "client_key",
    "limit_for",
    "principal_key",
]


log = logging.getLogger("cedarberg.ratelimit")


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


def principal_key(principal: Principal) -> str:
    """The key a principal's budget is kept under, wherever it is spent (requests, token
    issuance, console sign-in, replayed plans): ids are unique only within their kind
    (`gateway.authn.principal`), so the kind prefixes the id, and a user and a service of one id
    never share a budget."""
    return f"{principal.kind}:{principal.id}"


# A TAT past ``now + period`` by less than this fraction of an interval is float rounding (N
# additions of period/N), not an excess hit.
_ROUNDING = 1e-9
_monotonic = time.monotonic


@dataclass(frozen=True, slots=True)
class Rate:
    """One limit "amount per period" of one budget (e.g. the address budget's "2000/second")."""

    interval: float  # seconds: period / amount, what one hit moves the TAT by
    period: float  # seconds: how far past now the TAT may run, the burst allowance
    text: str  # e.g. "20 per 1 minute", for the log
    key: str  # this rate's part of a Redis key, e.g. "20/60"
    slot: int  # the table of `MemoryGcra` that holds this budget's TATs


def _rates(limit: str, first_slot: int) -> tuple[Rate, ...]:
    return tuple(
        Rate(
            interval=item.get_expiry() / item.amount,
            period=float(item.get_expiry()),
            text=str(item),
            key=f"{item.amount}/{item.get_expiry()}",
            slot=first_slot + i,
        )
        for i, item in enumerate(parse_many(limit))
    )


def _retry(rate: Rate, wait: float) -> RetryAfter:
    # Rounded up: retrying after `seconds` is admitted (unless others spent the budget meanwhile).
    return RetryAfter(seconds=max(1, math.ceil(wait)), limit=rate.text)


class MemoryGcra:
    """GCRA in this process's memory: one dict (identity -> TAT) per rate, on `time.monotonic`.

    Event-loop confined and synchronous: nothing awaits between reading and writing a TAT, so no
    lock is needed and a hit allocates nothing but its float.

    Bounded: at most ``max_keys`` keys over all tables. A sweep runs only when a *new* key would
    pass a threshold; it drops every key whose TAT has passed (that key is back to a full budget:
    forgetting it changes nothing) and, if more than half of ``max_keys`` keys are still live (a
    flood of distinct clients), keeps only the half furthest from a full budget: a forgotten key
    gets at most its full budget back, and the keys a flood cannot displace are exactly those
    that spent the most (a locked-out guesser stays locked out). The threshold is then twice the
    keys left (at least `_MIN_SWEEP`, at most ``max_keys``), so a sweep of ``n`` keys follows at
    least ``n`` insertions: amortised O(1) per new key (plus a sort, in C, when a flood overflows).
    """

    DEFAULT_MAX_KEYS = 65_536
    _MIN_SWEEP = 1024

    def __init__(self, slots: int, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if max_keys < 2:
            raise ValueError("max_keys must be at least 2")
        self._tables: list[dict[str, float]] = [{} for _ in range(slots)]
        self._max_keys = max_keys
        self._count = 0  # keys in all tables, swept or not
        self._sweep_at = min(max_keys, self._MIN_SWEEP)

    @property
    def key_count(self) -> int:
        return self._count

    @property
    def max_keys(self) -> int:
        return self._max_keys

    def hit(self, rates: tuple[Rate, ...], ident: str) -> RetryAfter | None:
        """Admit one hit of ``ident`` under every rate, or under none (then: how long to wait)."""
        now = _monotonic()
        tables = self._tables
        if len(rates) == 1:  # the common case, without the second pass
            rate = rates[0]
            table = tables[rate.slot]
            tat = table.get(ident)
            new = (tat if tat is not None and tat > now else now) + rate.interval
            over = new - now - rate.period
            if over > rate.interval * _ROUNDING:
                return _retry(rate, over)
            if tat is None:
                self._insert(rate.slot, ident, new, now)
            else:
                table[ident] = new
            return None
        denied = self._denied(rates, ident, now)
        if denied is not None:
            return denied
        for rate in rates:
            tat = tables[rate.slot].get(ident)
            new = (tat if tat is not None and tat > now else now) + rate.interval
            if tat is None:
                self._insert(rate.slot, ident, new, now)
            else:
                tables[rate.slot][ident] = new
        return None

    def peek(self, rates: tuple[Rate, ...], ident: str) -> RetryAfter | None:
        """What `hit` would answer, without counting anything."""
        return self._denied(rates, ident, time.monotonic())

    def _denied(self, rates: tuple[Rate, ...], ident: str, now: float) -> RetryAfter | None:
        worst: Rate | None = None
        wait = 0.0
        for rate in rates:
            tat = self._tables[rate.slot].get(ident)
            over = (tat if tat is not None and tat > now else now) + rate.interval - now - rate.period
            if over > rate.interval * _ROUNDING and over > wait:
                worst, wait = rate, over
        return None if worst is None else _retry(worst, wait)

    def _insert(self, slot: int, ident: str, tat: float, now: float) -> None:
        if self._count >= self._sweep_at:
            self._sweep(now)
        self._tables[slot][ident] = tat
        self._count += 1

    def _sweep(self, now: float) -> None:
        # Rebuilt, not deleted from: a dict never shrinks in place.
        tables = [{k: tat for k, tat in t.items() if tat > now} for t in self._tables]
        count = sum(map(len, tables))
        keep = self._max_keys // 2
        if count > keep:
            tats = sorted(tat for t in tables for tat in t.values())
            cutoff = tats[count - keep - 1]
            tables = [{k: tat for k, tat in t.items() if tat > cutoff} for t in tables]
            count = sum(map(len, tables))
        self._tables = tables
        self._count = count
        self._sweep_at = min(self._max_keys, max(self._MIN_SWEEP, 2 * count))

    def reset(self) -> None:
        self._tables = [{} for _ in self._tables]
        self._count = 0


# KEYS: one per rate. ARGV[1]: "1" to hit, "0" to look; then interval and period (seconds) per
# rate. Answers {0, "0"} when admitted (and, for a hit, every TAT moved), else {i, wait} with the
# rate that waits longest. TATs are stored with 17 digits (exact); each key expires when its
# budget is full again. TIME is Redis's clock: gateway hosts' clocks do not matter.
_GCRA_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local worst, wait, tats = 0, 0, {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i])
  local period = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  tats[i] = tat + interval
  local over = tats[i] - now - period
  if over > interval * 1e-9 and over > wait then worst, wait = i, over end
end
if worst > 0 then return {worst, string.format('%.17g', wait)} end
if ARGV[1] == '1' then
  for i, key in ipairs(KEYS) do
    redis.call('SET', key, string.format('%.17g', tats[i]), 'PX', math.ceil((tats[i] - now) * 1000))
  end
end
return {0, '0'}
"""


class RedisGcra:
    """GCRA in Redis: one round trip (`_GCRA_LUA`, by its SHA once loaded) per call."""

    def __init__(self, settings: RateLimitSettings) -> None:
        import redis.asyncio

        self._pool = redis.asyncio.ConnectionPool.from_url(
            settings.storage_uri,
            socket_timeout=settings.storage_timeout_seconds,
            socket_connect_timeout=settings.storage_timeout_seconds,
            health_check_interval=30,
        )
        self._client: redis.asyncio.Redis = redis.asyncio.Redis(connection_pool=self._pool)
        self._script = self._client.register_script(_GCRA_LUA)
        self._prefix = f"{settings.key_prefix}:gcra"

    async def call(self, hit: bool, rates: tuple[Rate, ...], scope: str, ident: str) -> RetryAfter | None:
        keys = [f"{self._prefix}:{scope}:{ident}:{rate.key}" for rate in rates]
        args: list[str | float] = ["1" if hit else "0"]
        for rate in rates:
            args += (rate.interval, rate.period)
        worst, wait = await self._script(keys=keys, args=args)
        return None if int(worst) == 0 else _retry(rates[int(worst) - 1], float(wait))

    async def ping(self) -> bool:
        answer: object = await self._client.ping()  # type: ignore[misc]  # typed sync-or-async
        return bool(answer)

    async def aclose(self) -> None:
        await self._client.aclose()
        await self._pool.aclose()


class RateLimiter:
    """GCRA limits over one storage. Create with `open`; close with `aclose`."""

    def __init__(self, settings: RateLimitSettings, *, max_keys: int = MemoryGcra.DEFAULT_MAX_KEYS) -> None:
        """Limits of ``settings`` on the storage its ``storage_uri`` names (nothing connects
        yet). ``max_keys`` bounds the keys `MemoryGcra` holds (memory storage only)."""
        self._settings = settings
        self._enabled = settings.enabled
        self._ipv6_prefix = settings.ipv6_prefix_length
        self._address = _rates(settings.per_address, 0)
        self._auth_failures = _rates(settings.auth_failures_per_address, len(self._address))
        slots = len(self._address) + len(self._auth_failures)
        self._classes: dict[str, tuple[Rate, ...]] = {}
        for op in OperationClass:
            self._classes[op.value] = rates = _rates(limit_for(settings, op), slots)
            slots += len(rates)
        self._memory: MemoryGcra | None = None
        self._redis: RedisGcra | None = None
        self._failures: tuple[type[BaseException], ...] = (OSError,)
        self._storage_down = False
        if urlsplit(settings.storage_uri).scheme == "memory":
            self._memory = MemoryGcra(slots, max_keys)
        else:
            import redis.exceptions

            self._redis = RedisGcra(settings)
            self._failures += (redis.exceptions.RedisError,)

    @classmethod
    def open(cls, settings: RateLimitSettings) -> RateLimiter:
        """Build a limiter for ``settings``. Nothing is connected yet (Redis connects lazily, on
        the event loop of the first call, which must be the loop that keeps using it); call
        `check` to find out whether the storage answers."""
        return cls(settings)

    def _storage_state(self, down: bool, err: BaseException | None = None) -> None:
        """Log a change of the storage's state (called on every remote call's outcome; acts only
        on a change, so an outage is one warning, not one per request)."""
        if down == self._storage_down:
            return
        self._storage_down = down
        if down:
            # The error's class only: a Redis error's text may carry the storage URI's password.
            log.warning(
                "rate-limit storage unreachable (%s): requests are refused with 503 until it answers",
                type(err).__name__,
            )
        else:
            log.warning("rate-limit storage reachable again: requests are limited and served")

    @property
    def settings(self) -> RateLimitSettings:
        return self._settings

    @property
    def memory(self) -> MemoryGcra | None:
        """The in-process storage (None on Redis): its key count, for tests and benchmarks."""
        return self._memory

    async def aclose(self) -> None:
        """Release the storage's connections (idempotent)."""
        if self._redis is not None:
            remote, self._redis = self._redis, None
            await remote.aclose()

    async def check(self) -> bool:
        """Whether the storage answers now (for readiness); never raises."""
        if self._redis is None:
            return self._memory is not None
        try:
            async with asyncio.timeout(self._settings.storage_timeout_seconds):
                answered = await self._redis.ping()
        except self._failures as err:  # builtin TimeoutError is an OSError
            self._storage_state(True, err)
            return False
        self._storage_state(not answered)
        return answered

    # -- the checks ---------------------------------------------------------------------------

    async def hit_address(self, addr: str | None) -> RetryAfter | None:
        """Count one request from ``addr`` (before authentication)."""
        memory = self._memory
        if memory is not None and self._enabled:  # the read path: no coroutine below this one
            return memory.hit(self._address, client_key(addr, self._ipv6_prefix))
        return await self._hit(self._address, "address", self.client(addr))

    async def hit_principal(self, principal_id: str, op_class: OperationClass | str) -> RetryAfter | None:
        """Count one ``op_class`` operation by an authenticated principal."""
        rates = self._classes.get(op_class)
        if rates is None:
            raise ValueError(f"not an operation class: {op_class!r}")
        memory = self._memory
        if memory is not None and self._enabled:
            return memory.hit(rates, principal_id)
        return await self._hit(rates, op_class, principal_id)

    async def hit_auth_failure(self, addr: str | None) -> RetryAfter | None:
        """Count one failed authentication from ``addr``; a `RetryAfter` once the limit is reached."""
        return await self._hit(self._auth_failures, "authfail", self.client(addr))

    async def auth_failures_exceeded(self, addr: str | None) -> RetryAfter | None:
        """Whether ``addr`` has used up its failed-authentication budget. Consumes nothing: call
        it before any expensive authentication work and turn the request away if it is not None."""
        if not self._enabled:
            return None
        ident = self.client(addr)
        if self._memory is not None:
            return self._memory.peek(self._auth_failures, ident)
        return await self._remote(False, self._auth_failures, "authfail", ident)

    # -- internals ----------------------------------------------------------------------------

    def client(self, addr: str | None) -> str:
        """The identity `addr` is limited under (see `client_key`); API key lockouts use it too."""
        return client_key(addr, self._ipv6_prefix)

    async def _hit(self, rates: tuple[Rate, ...], scope: str, ident: str) -> RetryAfter | None:
        if not self._enabled:
            return None
        if self._memory is not None:  # no I/O, no timer, no coroutine below this one
            return self._memory.hit(rates, ident)
        return await self._remote(True, rates, scope, ident)

    async def _remote(self, hit: bool, rates: tuple[Rate, ...], scope: str, ident: str) -> RetryAfter | None:
        """One script call, bounded in time; every storage failure becomes
        `RateLimitUnavailableError` (fail closed)."""
        remote = self._redis
        if remote is None:
            raise RateLimitUnavailableError("rate limiter closed")
        try:
            # Connect + script load + a round trip, each bounded by the socket timeout.
            async with asyncio.timeout(self._settings.storage_timeout_seconds * 3):
                answer = await remote.call(hit, rates, scope, ident)
        except self._failures as err:  # builtin TimeoutError is an OSError
            self._storage_state(True, err)
            raise RateLimitUnavailableError("rate-limit storage unavailable") from err
        if self._storage_down:
            self._storage_state(False)
        return answer
