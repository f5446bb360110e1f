"""The key ring over the real local provider: cache limits, single flight, rotation, fail-closed.

`_ScriptedProvider` below is a unit-test double of the KeyProvider Protocol, used only where the
key ring's own behaviour is under test and no real KMS can produce the situation on demand: a
call that hangs, a provider that raises a foreign exception, a provider without context support.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from cedarberg.kms.errors import KmsRefusedError, KmsUnavailableError, UnknownProviderError
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.keys import Context, DataKey, WrappedKey
from cedarberg.kms.providers.local import LocalKeyProvider, add_key_version, open_provider
from cedarberg.kms.settings import CacheSettings, KmsSettings

URI = "local://default"
CONTEXT = {"warehouse": "wh", "kind": "table", "object": "0b1c2d3e-0000-4000-8000-000000000001"}
OTHER = {**CONTEXT, "object": "0b1c2d3e-0000-4000-8000-000000000002"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _settings(kek: str = URI, timeout: float = 5.0, **cache: float) -> KmsSettings:
    return KmsSettings(kek=kek, timeout_seconds=timeout, cache=CacheSettings(**cache))


def _ring(
    key_dir: Path, clock: FakeClock | None = None, kek: str = URI, **cache: float
) -> tuple[KeyRing, LocalKeyProvider]:
    settings = _settings(kek, **cache)
    provider = open_provider(kek, settings, key_dir)
    ring = KeyRing(settings, key_dir, provider, clock=clock or FakeClock())
    return ring, provider


def _calls(ring: KeyRing, op: str, outcome: str = "ok", provider: str = "local") -> int:
    return ring.stats().get(f"kms_calls{{provider={provider},op={op},outcome={outcome}}}", 0)


@pytest.fixture
def key_dir(tmp_path: Path) -> Path:
    return tmp_path / "kms"


async def test_open_uses_the_configured_kek(key_dir: Path) -> None:
    ring = KeyRing.open(_settings(), key_dir)
    assert ring.kek_uri == URI
    assert (key_dir / "default.key").exists()
    assert await ring.current_version() == "1"
    await ring.aclose()


async def test_cache_hits_and_misses_are_counted(key_dir: Path) -> None:
    ring, provider = _ring(key_dir)
    data_key = await ring.new_data_key(CONTEXT)
    assert ring.stats()["cache_entries"] == 1

    assert await ring.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    assert await ring.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    stats = ring.stats()
    assert (stats["cache_hits"], stats["cache_misses"]) == (2, 0)
    assert provider.stats().get("unwrap", 0) == 0

    # the same wrapped key under another context is not served from the cache: the KMS refuses it
    with pytest.raises(KmsRefusedError):
        await ring.unwrap(data_key.wrapped, OTHER)
    assert ring.stats()["cache_misses"] == 1
    assert provider.stats()["unwrap"] == 1
    assert _calls(ring, "unwrap", "refused") == 1
    assert _calls(ring, "generate_data_key") == 1

    cold, cold_provider = _ring(key_dir)
    assert await cold.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    assert await cold.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    stats = cold.stats()
    assert (stats["cache_hits"], stats["cache_misses"]) == (1, 1)
    assert cold_provider.stats()["unwrap"] == 1
    assert _calls(cold, "unwrap") == 1


async def test_max_uses_forces_a_new_unwrap(key_dir: Path) -> None:
    ring, provider = _ring(key_dir, max_uses=2)
    wrapped = (await ring.new_data_key(CONTEXT)).wrapped
    for _ in range(2):
        await ring.unwrap(wrapped, CONTEXT)
    assert provider.stats().get("unwrap", 0) == 0
    await ring.unwrap(wrapped, CONTEXT)  # the two uses are spent
    assert provider.stats()["unwrap"] == 1
    assert ring.stats()["cache_expirations"] == 1


async def test_max_age_forces_a_new_unwrap(key_dir: Path) -> None:
    clock = FakeClock()
    ring, provider = _ring(key_dir, clock, max_age_seconds=10)
    wrapped = (await ring.new_data_key(CONTEXT)).wrapped
    clock.now += 9.9
    await ring.unwrap(wrapped, CONTEXT)
    assert provider.stats().get("unwrap", 0) == 0
    clock.now += 0.1  # 10 s after it was cached, however often it was used
    await ring.unwrap(wrapped, CONTEXT)
    assert provider.stats()["unwrap"] == 1
    assert ring.stats()["cache_expirations"] == 1
    await ring.unwrap(wrapped, CONTEXT)  # cached again, for another 10 s
    assert provider.stats()["unwrap"] == 1


async def test_max_entries_zero_disables_caching(key_dir: Path) -> None:
    ring, provider = _ring(key_dir, max_entries=0)
    data_key = await ring.new_data_key(CONTEXT)
    for _ in range(3):
        assert await ring.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    assert provider.stats()["unwrap"] == 3
    assert ring.stats()["cache_entries"] == 0
    assert ring.stats()["cache_hits"] == 0


async def test_least_recently_used_key_is_evicted(key_dir: Path) -> None:
    ring, provider = _ring(key_dir, max_entries=2)
    first = (await ring.new_data_key(CONTEXT)).wrapped
    second = (await ring.new_data_key(CONTEXT)).wrapped
    await ring.unwrap(first, CONTEXT)  # first is now the most recently used
    await ring.new_data_key(CONTEXT)  # evicts second
    assert ring.stats()["cache_evictions"] == 1
    await ring.unwrap(first, CONTEXT)
    assert provider.stats().get("unwrap", 0) == 0
    await ring.unwrap(second, CONTEXT)
    assert provider.stats()["unwrap"] == 1
    assert repr(ring) == "KeyRing(kek_uri='local://default', providers=1)"
    assert repr(ring._cache).startswith("DataKeyCache(entries=2,")


async def test_concurrent_misses_share_one_kms_call(key_dir: Path) -> None:
    ring, provider = _ring(key_dir)
    # A key wrapped under a version `provider` has not read yet: its unwrap re-reads the key file
    # off the event loop, so without single flight all callers would reach the provider.
    add_key_version(provider.key_file)
    elsewhere = open_provider(URI, _settings(), key_dir)
    data_key = await elsewhere.generate_data_key(CONTEXT)

    results = await asyncio.gather(*(ring.unwrap(data_key.wrapped, CONTEXT) for _ in range(10)))
    assert results == [data_key.plaintext] * 10
    assert provider.stats()["unwrap"] == 1
    assert ring.stats()["unwrap_coalesced"] == 9
    assert _calls(ring, "unwrap") == 1


async def test_a_failed_shared_call_fails_every_waiter_and_is_not_cached(key_dir: Path) -> None:
    ring, provider = _ring(key_dir)
    add_key_version(provider.key_file)
    elsewhere = open_provider(URI, _settings(), key_dir)
    wrapped = (await elsewhere.generate_data_key(CONTEXT)).wrapped

    results = await asyncio.gather(*(ring.unwrap(wrapped, OTHER) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, KmsRefusedError) for r in results)
    assert provider.stats()["unwrap"] == 1
    with pytest.raises(KmsRefusedError):
        await ring.unwrap(wrapped, OTHER)
    assert provider.stats()["unwrap"] == 2
    assert ring.stats()["cache_entries"] == 0


async def test_forget_forces_a_kms_call(key_dir: Path) -> None:
    ring, provider = _ring(key_dir)
    data_key = await ring.new_data_key(CONTEXT)
    await ring.unwrap(data_key.wrapped, CONTEXT)
    assert provider.stats().get("unwrap", 0) == 0
    ring.forget(data_key.wrapped)
    assert ring.stats()["cache_entries"] == 0
    assert await ring.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    assert provider.stats()["unwrap"] == 1


async def test_rewrap_after_a_new_kek_version(key_dir: Path) -> None:
    ring, provider = _ring(key_dir)
    data_key = await ring.new_data_key(CONTEXT)
    version = await ring.current_version()
    assert await ring.rewrap(data_key.wrapped, CONTEXT, version) is None

    add_key_version(provider.key_file)
    version = await ring.current_version()
    assert version == "2"
    rewrapped = await ring.rewrap(data_key.wrapped, CONTEXT, version)
    assert rewrapped is not None
    assert (rewrapped.kek_uri, rewrapped.kek_version) == (URI, "2")
    assert await ring.rewrap(rewrapped, CONTEXT, version) is None

    cold, cold_provider = _ring(key_dir)
    assert await cold.unwrap(rewrapped, CONTEXT) == data_key.plaintext
    assert cold_provider.stats()["unwrap"] == 1


async def test_rewrap_moves_keys_from_a_previously_configured_kek(key_dir: Path) -> None:
    old_ring, _ = _ring(key_dir, kek="local://old")
    data_key = await old_ring.new_data_key(CONTEXT)

    ring, _ = _ring(key_dir, kek="local://new")
    # the old KEK gets its own provider, opened on first use and kept
    assert await ring.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    rewrapped = await ring.rewrap(data_key.wrapped, CONTEXT, await ring.current_version())
    assert rewrapped is not None
    assert (rewrapped.kek_uri, rewrapped.kek_version) == ("local://new", "1")
    ring.forget(rewrapped)
    assert await ring.unwrap(rewrapped, CONTEXT) == data_key.plaintext
    assert _calls(ring, "unwrap") == 2


async def test_kek_uris_from_files_are_checked(key_dir: Path) -> None:
    ring, _ = _ring(key_dir)
    blob = b"\x01" * 60
    with pytest.raises(UnknownProviderError):
        await ring.unwrap(WrappedKey("file:///etc/passwd", "1", blob), CONTEXT)
    # a local KEK that does not exist is not created by reading a key that names it
    with pytest.raises(KmsRefusedError, match="does not exist"):
        await ring.unwrap(WrappedKey("local://planted", "1", blob), CONTEXT)
    assert sorted(os.listdir(key_dir)) == ["default.key"]
    # credentials are never sent to a host named only by a file
    for uri in ("vault-transit://evil.example:8200/transit/k", "azure-kv://evil.example/keys/k"):
        with pytest.raises(KmsRefusedError, match="not on a trusted host"):
            await ring.unwrap(WrappedKey(uri, "1", blob), CONTEXT)


# -- key ring behaviour that needs a provider misbehaving on demand ------------------------------


class _ScriptedProvider:
    """KeyProvider whose calls hang, raise, or answer; records the contexts it was given."""

    def __init__(
        self, *, hang: bool = False, error: BaseException | None = None, carries_context: bool = True
    ) -> None:
        self.hang = hang
        self.error = error
        self._carries_context = carries_context
        self.release = asyncio.Event()
        self.called = asyncio.Event()
        self.contexts: list[Mapping[str, str]] = []
        self.closed = False

    @property
    def kek_uri(self) -> str:
        return "scripted://k"

    @property
    def carries_context(self) -> bool:
        return self._carries_context

    async def _act(self, context: Context) -> None:
        self.contexts.append(dict(context))
        self.called.set()
        if self.hang:
            await self.release.wait()
        if self.error is not None:
            raise self.error

    async def generate_data_key(self, context: Context) -> DataKey:
        await self._act(context)
        return DataKey(b"k" * 32, WrappedKey(self.kek_uri, "1", b"g" * 32))

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        await self._act(context)
        return WrappedKey(self.kek_uri, "1", b"w" * 32)

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        await self._act(context)
        return b"k" * 32

    async def current_version(self) -> str:
        await self._act({})
        return "1"

    async def aclose(self) -> None:
        self.closed = True


WRAPPED = WrappedKey("scripted://k", "1", b"w" * 32)


def _scripted_ring(provider: _ScriptedProvider, tmp_path: Path, timeout: float = 5.0) -> KeyRing:
    return KeyRing(_settings("local://unused", timeout), tmp_path, provider)


async def test_a_hanging_kms_call_times_out_as_unavailable(tmp_path: Path) -> None:
    provider = _ScriptedProvider(hang=True)
    ring = _scripted_ring(provider, tmp_path, timeout=0.05)
    with pytest.raises(KmsUnavailableError, match=r"scripted KMS unwrap timed out after 0.05s"):
        await ring.unwrap(WRAPPED, CONTEXT)
    with pytest.raises(KmsUnavailableError, match="generate_data_key timed out"):
        await ring.new_data_key(CONTEXT)
    assert _calls(ring, "unwrap", "timeout", provider="scripted") == 1
    assert ring.stats()["cache_entries"] == 0
    provider.hang = False  # the KMS is back: nothing failed was cached
    assert await ring.unwrap(WRAPPED, CONTEXT) == b"k" * 32
    assert _calls(ring, "unwrap", "ok", provider="scripted") == 1


async def test_a_foreign_exception_becomes_unavailable_without_its_message(tmp_path: Path) -> None:
    provider = _ScriptedProvider(error=ConnectionResetError("token=hunter2 at 10.0.0.7"))
    ring = _scripted_ring(provider, tmp_path)
    with pytest.raises(KmsUnavailableError) as caught:
        await ring.unwrap(WRAPPED, CONTEXT)
    assert str(caught.value) == "scripted KMS unwrap failed"
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert _calls(ring, "unwrap", "error", provider="scripted") == 1

    provider.error = KmsRefusedError("scripted: key disabled")
    with pytest.raises(KmsRefusedError, match="key disabled"):
        await ring.current_version()
    assert _calls(ring, "current_version", "refused", provider="scripted") == 1


async def test_a_cancelled_waiter_does_not_cancel_the_shared_call(tmp_path: Path) -> None:
    provider = _ScriptedProvider(hang=True)
    ring = _scripted_ring(provider, tmp_path)
    first = asyncio.create_task(ring.unwrap(WRAPPED, CONTEXT))
    second = asyncio.create_task(ring.unwrap(WRAPPED, CONTEXT))
    await provider.called.wait()
    first.cancel()
    provider.release.set()
    assert await second == b"k" * 32
    assert first.cancelled()
    assert len(provider.contexts) == 1


async def test_providers_without_context_get_an_empty_one(tmp_path: Path) -> None:
    provider = _ScriptedProvider(carries_context=False)
    ring = _scripted_ring(provider, tmp_path)
    await ring.new_data_key(CONTEXT)
    await ring.unwrap(WRAPPED, OTHER)
    await ring.rewrap(WrappedKey("scripted://k", "0", b"w" * 32), OTHER, "1")  # unwrap + wrap
    assert provider.contexts == [{}, {}, {}, {}]
    # the cache is still keyed by the caller's context: WRAPPED is cached under OTHER only
    await ring.unwrap(WRAPPED, OTHER)
    assert len(provider.contexts) == 4
    await ring.unwrap(WRAPPED, CONTEXT)
    assert len(provider.contexts) == 5


async def test_aclose_closes_providers_and_fails_closed(tmp_path: Path) -> None:
    provider = _ScriptedProvider()
    ring = _scripted_ring(provider, tmp_path)
    await ring.unwrap(WRAPPED, CONTEXT)
    await ring.aclose()
    assert provider.closed
    assert ring.stats()["cache_entries"] == 0
    with pytest.raises(KmsUnavailableError, match="closed"):
        await ring.unwrap(WRAPPED, CONTEXT)
