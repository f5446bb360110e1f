"""The registry read cache and the load-result cache: bounds, expiry, invalidation, and the
generation guard that keeps a read racing a write out of the cache."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from cedarberg.catalog.load_results import LoadResultCache
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store.cache import RegistryCache, RegistryKey, Touched
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.pool import Store


def test_entries_expire_after_the_ttl() -> None:
    cache = RegistryCache(ttl_seconds=0.05)
    key = RegistryKey.object("w", "ns", "t")
    cache.store(key, "row", cache.generation)
    assert cache.lookup(key) == (True, "row")
    time.sleep(0.06)
    assert cache.lookup(key) == (False, None)


def test_a_write_forgets_what_it_touched_and_only_that() -> None:
    cache = RegistryCache(ttl_seconds=60)
    table, other = RegistryKey.object("w", "ns", "t"), RegistryKey.object("w", "ns", "u")
    props = RegistryKey.namespace("w", "ns")
    for key in (table, other, props):
        cache.store(key, key, cache.generation)
    cache.forget(Touched(objects={("w", "ns", "t")}))
    assert cache.lookup(table) == (False, None)
    assert cache.lookup(other) == (True, other)
    assert cache.lookup(props) == (True, props)
    cache.forget(Touched(namespaces={("w", "ns")}))
    assert cache.lookup(props) == (False, None)
    cache.forget(Touched(everything=True))
    assert cache.lookup(other) == (False, None)


def test_a_read_that_raced_a_write_is_not_kept() -> None:
    cache = RegistryCache(ttl_seconds=60)
    key = RegistryKey.object("w", "ns", "t")
    generation = cache.generation  # a reader starts
    cache.forget(Touched(objects={("w", "ns", "t")}))  # a write ends meanwhile
    cache.store(key, "maybe stale", generation)
    assert cache.lookup(key) == (False, None)
    cache.forget(Touched())  # a transaction that changed nothing invalidates nothing
    cache.store(key, "fresh", cache.generation)
    assert cache.lookup(key) == (True, "fresh")


def test_a_change_in_a_container_forgets_all_its_listing_pages() -> None:
    cache = RegistryCache(ttl_seconds=60)
    page = cache.listing_key(("objects", "w", "ns"), "table", None, 100)
    sibling = cache.listing_key(("objects", "w", "other"), "table", None, 100)
    cache.store(page, ["t"], cache.generation)
    cache.store(sibling, ["x"], cache.generation)
    cache.forget(Touched(objects={("w", "ns", "u")}))
    assert cache.lookup(cache.listing_key(("objects", "w", "ns"), "table", None, 100)) == (False, None)
    assert cache.lookup(cache.listing_key(("objects", "w", "other"), "table", None, 100)) == (True, ["x"])


def test_size_is_bounded_least_recently_used_first() -> None:
    cache = RegistryCache(ttl_seconds=60, max_entries=2)
    for name in ("a", "b"):
        cache.store(name, name, cache.generation)
    cache.lookup("a")
    cache.store("c", "c", cache.generation)
    assert len(cache) == 2
    assert cache.lookup("b") == (False, None)
    assert cache.lookup("a") == (True, "a")


def test_a_zero_ttl_turns_the_cache_off() -> None:
    cache = RegistryCache(ttl_seconds=0)
    cache.store("k", "v", cache.generation)
    assert not cache.enabled
    assert cache.lookup("k") == (False, None)


async def _store(registry_url: str, ttl: float) -> Store:
    """A fresh registry (the `registry_url` fixture) whose reads go through a cache with this TTL."""
    return await open_store(registry_url, cache=RegistryCache(ttl_seconds=ttl))


async def test_store_reads_once_for_concurrent_misses_and_forgets_on_write(registry_url: str) -> None:
    store = await _store(registry_url, ttl=60)
    reads = 0

    async def load(tx: object) -> int:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return reads

    try:
        key = RegistryKey.namespace("w", "ns")
        assert await asyncio.gather(*(store.cached(key, load) for _ in range(8))) == [1] * 8
        assert reads == 1
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
        assert await store.cached(key, load) == 2
    finally:
        await store.close()


async def test_a_failed_write_still_forgets_what_it_touched(registry_url: str) -> None:
    store = await _store(registry_url, ttl=60)
    key = RegistryKey.namespace("w", "ns")
    try:
        store.cache.store(key, {"old": "grant"}, store.cache.generation)

        async def fail_midway() -> None:
            async with store.write() as tx:
                await namespace_rows.set_namespace_properties(tx, "w", "ns", {"new": "grant"})
                raise RuntimeError("midway")

        with pytest.raises(RuntimeError):
            await fail_midway()
        assert store.cache.lookup(key) == (False, None)
    finally:
        await store.close()


async def test_load_results_are_bounded_by_bytes_and_age() -> None:
    cache = LoadResultCache(max_bytes=400, max_age_seconds=0.05)
    renders = 0

    def body(size: int) -> Callable[[], Awaitable[bytes]]:
        async def render() -> bytes:
            nonlocal renders
            renders += 1
            return b"x" * size

        return render

    assert await cache.get_or_render(("u", "v1", "all"), body(100)) == b"x" * 100
    assert await cache.get_or_render(("u", "v1", "all"), body(100)) == b"x" * 100
    assert renders == 1
    await cache.get_or_render(("u", "v2", "all"), body(100))
    await cache.get_or_render(("u", "v3", "all"), body(100))
    await cache.get_or_render(("u", "v4", "all"), body(100))
    assert cache.bytes <= 400
    kept = len(cache)
    await cache.get_or_render(("big", "v1", "all"), body(200))
    assert len(cache) == kept  # over a quarter of the budget: answered, not kept
    await asyncio.sleep(0.06)
    renders = 0
    await cache.get_or_render(("u", "v4", "all"), body(100))
    assert renders == 1, "an entry past its age is rendered again"


async def test_a_stale_entry_is_answered_while_one_read_refreshes_it(registry_url: str) -> None:
    store = await _store(registry_url, ttl=0.4)
    reads = 0

    async def load(tx: object) -> int:
        nonlocal reads
        reads += 1
        return reads

    try:
        key = RegistryKey.object("w", "ns", "t")
        assert await store.cached(key, load) == 1
        await asyncio.sleep(0.25)  # the second half of the TTL: answered, and refreshed once
        assert await asyncio.gather(*(store.cached(key, load) for _ in range(5))) == [1] * 5
        deadline = time.monotonic() + 5
        while store.cache.lookup(key) != (True, 2):
            assert time.monotonic() < deadline, "the stale entry was not refreshed"
            await asyncio.sleep(0.01)
        assert reads == 2, "one refresh for all the requests that found the entry stale"
        assert await store.cached(key, load) == 2
        await asyncio.sleep(0.45)  # past the TTL: never answered, read again before answering
        assert await store.cached(key, load) == 3
    finally:
        await store.close()


def test_listing_generations_are_bounded_and_a_restart_answers_no_old_page() -> None:
    cache = RegistryCache(ttl_seconds=60, max_entries=2)
    page = cache.listing_key(("objects", "w", "ns0"), "table", None, 100)
    cache.store(page, ["t"], cache.generation)
    cache.forget(Touched(namespaces={("w", "ns0")}))  # ns0's listing moves to generation 1
    newer = cache.listing_key(("objects", "w", "ns0"), "table", None, 100)
    cache.store(newer, ["t", "u"], cache.generation)
    for i in range(1, 200):  # a churn of namespaces: each write adds a container
        cache.forget(Touched(namespaces={("w", f"ns{i}")}))
        assert len(cache._containers) <= 64 + 2
    # ns0's generation started again at 0: the page first stored under it is not answered.
    assert cache.listing_key(("objects", "w", "ns0"), "table", None, 100) == page
    assert cache.lookup(page) == (False, None)
    assert cache.lookup(newer) == (False, None)
