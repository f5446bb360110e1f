"""The key ring: the one object the catalog uses to get, unwrap and rotate data keys.

It owns the provider of the configured (default) KEK, which wraps every new data key, and opens
a provider for any other KEK URI it meets (keys wrapped under a previously configured KEK, or named
in a sealed file) on first use, keeping it. It puts a `DataKeyCache` in front of unwrapping.

Failure policy (fail closed):
- Every provider call runs under `asyncio.timeout(settings.timeout_seconds)`; a timeout is a
  KmsUnavailableError. Any exception other than a KmsError escaping a provider is a
  KmsUnavailableError too, whose message names only the provider and the operation (SDK errors can
  quote requests). The caller answers 503 and writes nothing.
- Concurrent misses for the same key share one KMS call (single flight): a cold cache under load
  costs one call per key, not one per request. A failed call is not cached; the next caller retries.

Encryption context: providers with `carries_context` get the caller's context, so the KMS itself
refuses a wrapped key copied onto another object. Providers without it (Azure Key Vault's RSA
wrap) get an empty mapping: they would refuse a non-empty one rather than drop it silently, and
nothing is lost, because the envelope's own associated data binds every sealed document to its
warehouse, object and version, and the cache is keyed by the context either way.

Credential safety: a KEK URI read from a sealed file is data, not configuration. For schemes whose
URI names the host credentials are sent to (vault-transit, azure-kv), only the host of the
configured KEK and of `trusted_kek_uris` is contacted, so a planted file cannot send the Vault
token or an Azure bearer token elsewhere. Other schemes send credentials only to the endpoint in
the settings. At most `MAX_PROVIDERS` providers are kept.

Counters (`stats()`), flat names with Prometheus-style labels, stable for export:

    kms_calls{provider=SCHEME,op=OP,outcome=OUTCOME}   KMS calls made
        OP: generate_data_key | wrap | unwrap | current_version | probe_wrap | probe_unwrap
        OUTCOME: ok | refused | unavailable | timeout | error (a non-KmsError) | cancelled
    cache_hits, cache_misses          unwrap lookups served from / not found in the cache
    cache_evictions                   keys dropped to make room (LRU)
    cache_expirations                 keys dropped for age or use count
    cache_entries                     keys cached now (a gauge)
    unwrap_coalesced                  unwraps that joined another caller's in-flight KMS call

`observer` (optional) is told of each KMS call and cache lookup as it happens, for metrics that
must be summed over processes. `healthy()` wraps and unwraps a probe key under the default KEK
(readiness), at most once per `_HEALTH_TTL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Protocol, TypeVar

from cedarberg.kms import registry
from cedarberg.kms.cache import CacheKey, DataKeyCache, cache_key
from cedarberg.kms.errors import KmsError, KmsRefusedError, KmsUnavailableError
from cedarberg.kms.keys import DATA_KEY_BYTES, Context, DataKey, WrappedKey
from cedarberg.kms.provider import KeyProvider
from cedarberg.kms.settings import KmsSettings

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_NO_CONTEXT: Context = {}
# Readiness probes of every worker of every pod must not turn into a stream of KMS calls.
_HEALTH_TTL_SECONDS = 10.0
_PROBE_CONTEXT: Context = {"purpose": "cedarberg-health-probe"}


class KeyRingObserver(Protocol):
    """Told of every KMS call and data-key cache lookup as it happens (the gateway's metrics)."""

    def kms_call(self, provider: str, op: str, outcome: str) -> None: ...

    def cache_lookup(self, hit: bool) -> None: ...


MAX_PROVIDERS = 32
# Schemes whose KEK URI names the host that receives our credentials.
_HOST_SCHEMES = frozenset({"vault-transit", "azure-kv"})


def _scheme(kek_uri: str) -> str:
    return kek_uri.partition("://")[0]


def _credential_host(kek_uri: str) -> str | None:
    """`scheme://host[:port]` for schemes that send credentials to the URI's host, else None."""
    scheme, _, rest = kek_uri.partition("://")
    if scheme not in _HOST_SCHEMES:
        return None
    return f"{scheme}://{rest.split('/', 1)[0].lower()}"


class KeyRing:
    """Data keys for the catalog. Lives on one event loop; `aclose` it on shutdown."""

    def __init__(
        self,
        settings: KmsSettings,
        local_key_dir: Path,
        default: KeyProvider,
        *,
        clock: Callable[[], float] = time.monotonic,
        trusted_kek_uris: Iterable[str] = (),
    ) -> None:
        self._settings = settings
        self._local_key_dir = local_key_dir
        self._default = default
        self._providers: dict[str, KeyProvider] = {settings.kek: default, default.kek_uri: default}
        hosts = (_credential_host(uri) for uri in (settings.kek, default.kek_uri, *trusted_kek_uris))
        self._trusted_hosts = {host for host in hosts if host is not None}
        self._cache = DataKeyCache(settings.cache, clock)
        self._inflight: dict[CacheKey, asyncio.Task[bytes]] = {}
        self._counters: Counter[str] = Counter()
        self._closed = False
        self._clock = clock
        self._health: tuple[float, bool] | None = None  # (checked at, usable)
        self._health_lock = asyncio.Lock()
        self.observer: KeyRingObserver | None = None

    @classmethod
    def open(
        cls,
        settings: KmsSettings,
        local_key_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        trusted_kek_uris: Iterable[str] = (),
    ) -> KeyRing:
        """Open the provider of `settings.kek` (no network I/O; a local key file is created or
        checked now). Raises KmsError if the KEK URI or its settings are unusable."""
        default = registry.open_provider(settings.kek, settings, local_key_dir)
        return cls(settings, local_key_dir, default, clock=clock, trusted_kek_uris=trusted_kek_uris)

    def __repr__(self) -> str:
        return f"KeyRing(kek_uri={self.kek_uri!r}, providers={len(set(map(id, self._providers.values())))})"

    @property
    def kek_uri(self) -> str:
        """The KEK new data keys are wrapped under."""
        return self._default.kek_uri

    async def new_data_key(self, context: Context) -> DataKey:
        """A fresh data key wrapped under the default KEK for `context` (also cached)."""
        provider = self._default
        ctx = self._context_for(provider, context)
        data_key = await self._call(provider, "generate_data_key", lambda: provider.generate_data_key(ctx))
        self._cache.put(data_key.wrapped, context, data_key.plaintext)
        return data_key

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        """The plaintext of `wrapped`, bound to `context`: from the cache, or from the KMS of its
        KEK. Raises KmsRefusedError (wrong context, tampered, unknown or untrusted KEK) or
        KmsUnavailableError (retry later)."""
        self._check_open()
        cached = self._cache.get(wrapped, context)
        if self.observer is not None:
            self.observer.cache_lookup(cached is not None)
        if cached is not None:
            return cached
        key = cache_key(wrapped, context)
        flight = self._inflight.get(key)
        if flight is None:
            flight = asyncio.get_running_loop().create_task(self._unwrap_flight(key, wrapped, context))
            flight.add_done_callback(_retrieve_exception)
            self._inflight[key] = flight
        else:
            self._counters["unwrap_coalesced"] += 1
        # shield: one caller giving up (cancelled) must not cancel the call the others wait for.
        return await asyncio.shield(flight)

    async def current_version(self) -> str:
        """The version of the default KEK that new keys are wrapped under now."""
        provider = self._default
        return await self._call(provider, "current_version", provider.current_version)

    async def rewrap(self, wrapped: WrappedKey, context: Context, current_version: str) -> WrappedKey | None:
        """`wrapped` rewrapped under the default KEK, or None if it already is under the default
        KEK at `current_version` (from `current_version()`, asked once per rotation pass)."""
        if wrapped.kek_uri == self.kek_uri and wrapped.kek_version == current_version:
            return None
        plaintext = await self.unwrap(wrapped, context)
        provider = self._default
        ctx = self._context_for(provider, context)
        rewrapped = await self._call(provider, "wrap", lambda: provider.wrap(plaintext, ctx))
        self._cache.put(rewrapped, context, plaintext)
        return rewrapped

    def forget(self, wrapped: WrappedKey) -> None:
        """Drop `wrapped` from the cache (its data key is being destroyed). An unwrap of it in
        flight still answers its callers but is not cached."""
        self._cache.forget(wrapped)
        wrapped_id = (wrapped.kek_uri, wrapped.kek_version, wrapped.ciphertext)
        for key in [k for k in self._inflight if k[:3] == wrapped_id]:
            del self._inflight[key]

    async def healthy(self) -> bool:
        """Whether the default KEK wraps and unwraps a probe data key now. The answer is kept for
        a few seconds (checks arriving meanwhile share it), so probes cost the KMS little."""
        async with self._health_lock:
            if self._health is not None and self._clock() - self._health[0] < _HEALTH_TTL_SECONDS:
                return self._health[1]
            usable = await self._probe()
            self._health = (self._clock(), usable)
            return usable

    async def _probe(self) -> bool:
        provider = self._default
        ctx = self._context_for(provider, _PROBE_CONTEXT)
        try:
            data_key = await self._call(provider, "probe_wrap", lambda: provider.generate_data_key(ctx))
            plaintext = await self._call(
                provider, "probe_unwrap", lambda: provider.unwrap(data_key.wrapped, ctx)
            )
        except KmsError:
            return False
        return hmac.compare_digest(plaintext, data_key.plaintext)

    def stats(self) -> dict[str, int]:
        """Counters by stable name (see the module docstring)."""
        counters = dict(self._counters)
        counters.update(
            cache_hits=self._cache.hits,
            cache_misses=self._cache.misses,
            cache_evictions=self._cache.evictions,
            cache_expirations=self._cache.expirations,
            cache_entries=len(self._cache),
        )
        return counters

    async def aclose(self) -> None:
        """Cancel unwraps in flight, drop cached keys and close every provider."""
        self._closed = True
        flights = list(self._inflight.values())
        self._inflight.clear()
        for flight in flights:
            flight.cancel()
        await asyncio.gather(*flights, return_exceptions=True)
        self._cache.clear()
        providers = list({id(p): p for p in self._providers.values()}.values())
        results = await asyncio.gather(*(self._close(p) for p in providers), return_exceptions=True)
        for provider, result in zip(providers, results, strict=True):
            if isinstance(result, BaseException):
                _log.warning(
                    "closing %s KMS provider failed: %s", _scheme(provider.kek_uri), type(result).__name__
                )

    # -- internals ------------------------------------------------------------------------------

    async def _close(self, provider: KeyProvider) -> None:
        async with asyncio.timeout(self._settings.timeout_seconds):
            await provider.aclose()

    async def _unwrap_flight(self, key: CacheKey, wrapped: WrappedKey, context: Context) -> bytes:
        me = asyncio.current_task()
        try:
            provider = self._provider_for(wrapped.kek_uri)
            ctx = self._context_for(provider, context)
            plaintext = await self._call(provider, "unwrap", lambda: provider.unwrap(wrapped, ctx))
            if len(plaintext) != DATA_KEY_BYTES:
                raise KmsRefusedError(f"{_scheme(wrapped.kek_uri)} KMS unwrap returned a malformed data key")
            if self._inflight.get(key) is me:  # not forgotten meanwhile
                self._cache.put(wrapped, context, plaintext)
            return plaintext
        finally:
            if self._inflight.get(key) is me:
                del self._inflight[key]

    def _provider_for(self, kek_uri: str) -> KeyProvider:
        provider = self._providers.get(kek_uri)
        if provider is not None:
            return provider
        self._check_open()
        scheme = _scheme(kek_uri)
        host = _credential_host(kek_uri)
        if host is not None and host not in self._trusted_hosts:
            raise KmsRefusedError(f"KEK on {host} is not on a trusted host; not sending credentials there")
        if len(self._providers) >= MAX_PROVIDERS:
            raise KmsRefusedError(f"too many distinct KEKs in use (limit {MAX_PROVIDERS})")
        try:
            provider = registry.open_provider(kek_uri, self._settings, self._local_key_dir)
        except KmsError:
            raise
        except Exception as err:
            _log.warning("opening %s KMS provider failed: %s", scheme, type(err).__name__)
            raise KmsUnavailableError(f"{scheme} KMS provider could not be opened") from None
        self._providers[kek_uri] = provider
        return provider

    @staticmethod
    def _context_for(provider: KeyProvider, context: Context) -> Context:
        return context if provider.carries_context else _NO_CONTEXT

    def _check_open(self) -> None:
        if self._closed:
            raise KmsUnavailableError("key ring is closed")

    async def _call(self, provider: KeyProvider, op: str, call: Callable[[], Awaitable[_T]]) -> _T:
        self._check_open()
        scheme = _scheme(provider.kek_uri)
        outcome = "cancelled"
        try:
            async with asyncio.timeout(self._settings.timeout_seconds):
                result = await call()
            outcome = "ok"
            return result
        except TimeoutError:
            outcome = "timeout"
            raise KmsUnavailableError(
                f"{scheme} KMS {op} timed out after {self._settings.timeout_seconds:g}s"
            ) from None
        except KmsUnavailableError:
            outcome = "unavailable"
            raise
        except KmsError:
            outcome = "refused"
            raise
        except Exception as err:
            outcome = "error"
            _log.warning("%s KMS %s failed: %s", scheme, op, type(err).__name__)
            raise KmsUnavailableError(f"{scheme} KMS {op} failed") from None
        finally:
            self._counters[f"kms_calls{{provider={scheme},op={op},outcome={outcome}}}"] += 1
            if self.observer is not None:
                self.observer.kms_call(scheme, op, outcome)


def _retrieve_exception(task: asyncio.Task[bytes]) -> None:
    """Mark a flight's failure as seen: every waiter may have been cancelled before it ended."""
    if not task.cancelled():
        task.exception()
