"""Every in-memory cache of the gateway is bounded in estimated bytes, not only in entries, and
does not keep an entry larger than its cap: filling each with large entries keeps it under its
bound. (The JWKS cache holds one key set per configured issuer, each from a document of at most
`oidc.max_document_bytes`: tests/gateway/test_oidc.py::test_discovery_and_document_limits.)
A real gateway under a flood of large refused commits: tests/e2e/test_cache_memory.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cedarberg.gateway.authn.key_guards import VerifiedCache
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.token_cache import VerifiedTokenCache
from cedarberg.gateway.authz import entities
from cedarberg.gateway.authz.context import ChangeSummary, RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.byte_lru import ENTRY_OVERHEAD, ByteBoundedLru, estimate
from cedarberg.gateway.catalog_setup import close_catalog, open_catalog
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.resource_memo import ResourceMemo
from tests.support.gateway import bundled_policies

MIB = 1024**2
KEY = Ed25519PrivateKey.generate()


def _principal(n: int, group_bytes: int) -> Principal:
    groups = frozenset(f"g{n}-{i}-" + "x" * 1000 for i in range(group_bytes // 1000))
    return Principal(f"key:p{n}", PrincipalKind.SERVICE, groups, AuthMethod.API_KEY, {"api_key_id": f"k{n}"})


# -- the bounded map ---------------------------------------------------------------------------


def test_the_map_keeps_its_byte_bound_and_entry_cap() -> None:
    evicted: list[int] = []
    cache: ByteBoundedLru[int, str] = ByteBoundedLru(
        100, 10_000, 3_000, on_evict=lambda k, _: evicted.append(k)
    )
    for n in range(50):
        assert cache.put(n, "v", 1_000)
        assert cache.estimated_bytes <= 10_000
    assert len(cache) == 10_000 // (1_000 + ENTRY_OVERHEAD)
    assert evicted == list(range(50 - len(cache)))  # least recently used first
    cache.get(50 - len(cache))  # used: survives the next eviction
    cache.put(99, "v", 1_000)
    assert 50 - len(cache) in cache
    # An entry over the cap is not stored, and does not keep an older value under its key.
    assert not cache.put(49, "big", 3_000)
    assert 49 not in cache
    assert cache.estimated_bytes <= 10_000
    cache.clear()
    assert cache.estimated_bytes == 0
    assert not ByteBoundedLru[int, str](0, 10_000, 1_000).put(1, "v", 1)
    assert not ByteBoundedLru[int, str](10, 0, 1_000).put(1, "v", 1)


def test_estimates_count_every_string() -> None:
    assert estimate("x" * 1000) > 1000
    assert estimate(["x" * 1000, "y" * 1000]) > 2000
    assert estimate({"k" * 500: "v" * 500}) > 1000
    assert estimate(None) == 0


# -- the Cedar caches --------------------------------------------------------------------------


def _engine(tmp_path: Path, **bounds: int) -> PolicyEngine:
    directory = tmp_path / "policies"
    bundled_policies(directory)
    engine = PolicyEngine(directory, **bounds)
    engine.load()
    return engine


def _context(principal: Principal, n: int, key_bytes: int) -> RequestContext:
    keys = frozenset(f"p{n}.{i}." + "k" * 200 for i in range(key_bytes // 200))
    return RequestContext.of(
        principal, "127.0.0.1", ChangeSummary(frozenset({"set-properties"}), property_keys=keys)
    )


def test_the_decision_cache_is_bounded_in_bytes(tmp_path: Path) -> None:
    engine = _engine(
        tmp_path, decision_cache_bytes=2 * MIB, entity_cache_bytes=MIB, cache_entry_bytes=256 * 1024
    )
    reader = Principal("key:r", PrincipalKind.SERVICE, frozenset({"analysts"}), AuthMethod.API_KEY)
    namespace = entities.namespace_resource("w", ("sales",), [{"cedarberg.readers": "analysts"}])
    table = entities.child_table(namespace, "orders")
    for n in range(200):  # 200 refused commits, each with ~100 KB of context: 20 MB unbounded
        assert not engine.decide(reader, "updateTable", table, _context(reader, n, 100_000)).allowed
        assert engine.cache_bytes <= 2 * MIB + MIB + 16 * MIB
    assert engine._decisions.estimated_bytes <= 2 * MIB
    assert 0 < len(engine._decisions) < 200
    # A context over the entry cap is decided every time, never remembered.
    huge = _context(reader, 999, 400_000)
    hits = engine.decision_hits
    for _ in range(2):
        assert not engine.decide(reader, "updateTable", table, huge).allowed
    assert engine.decision_hits == hits
    # Control: ordinary decisions are still reused.
    small = RequestContext.of(reader, "127.0.0.1")
    assert engine.decide(reader, "loadTable", table, small).allowed
    assert engine.decide(reader, "loadTable", table, small).allowed
    assert engine.decision_hits == hits + 1


def test_the_entity_and_principal_caches_are_bounded_in_bytes(tmp_path: Path) -> None:
    engine = _engine(tmp_path, entity_cache_bytes=MIB, cache_entry_bytes=256 * 1024)
    context_of = RequestContext.of
    for n in range(100):  # principals with ~5 KB of groups, resources with ~10 KB of grants
        principal = _principal(n, 5_000)
        grants = {"cedarberg.readers": ",".join(sorted(principal.groups)[:1]), "note": "n" * 10_000}
        namespace = entities.namespace_resource("w", (f"ns{n}",), [grants])
        engine.decide(
            principal, "loadTable", entities.child_table(namespace, "t"), context_of(principal, "::1")
        )
    assert engine._cache.estimated_bytes <= MIB
    assert engine._principals.estimated_bytes <= 16 * MIB
    assert 0 < len(engine._cache) < 100


# -- authentication caches ---------------------------------------------------------------------


def test_the_verified_token_cache_is_bounded_in_bytes() -> None:
    cache = VerifiedTokenCache(max_entries=10_000, max_bytes=MIB)
    exp = time.time() + 600
    tokens = [jwt.encode({"sub": "x", "exp": exp, "n": n}, KEY, algorithm="EdDSA") for n in range(200)]
    for n, token in enumerate(tokens):  # ~50 KB principals (an OIDC issuer's many groups)
        cache.put(token, _principal(n, 50_000))
        assert cache.estimated_bytes <= MIB
    assert 0 < len(cache) < 200
    assert cache.get(tokens[-1]) is not None
    oversized = jwt.encode({"sub": "x", "exp": exp, "n": "big"}, KEY, algorithm="EdDSA")
    cache.put(oversized, _principal(999, 100_000))  # over the entry cap: verified every time
    assert cache.get(oversized) is None


def test_the_verified_key_cache_is_bounded_in_bytes() -> None:
    cache = VerifiedCache(10_000, 300.0, max_bytes=MIB)
    leases = []
    for n in range(200):
        principal = cache.remember(cache.digest(f"key{n}"), _principal(n, 50_000), f"k{n}", None)
        assert principal.proof is not None
        leases.append(principal.proof.lease)
        assert cache.estimated_bytes <= MIB
    assert 0 < len(cache) < 200
    now = time.monotonic()
    last = cache.digest("key199")
    assert cache.get(last, now, time.time()) is not None
    # What remembers a verification beyond the cache (request plans) ends with its entry.
    assert [lease.current for lease in leases].count(True) == len(cache)
    assert not leases[0].current
    assert leases[199].current
    cache.evict_key("k199")  # the per-key index follows evictions
    assert cache.get(last, now, time.time()) is None
    assert not leases[199].current
    held = {entry.key_id for entry, _size in cache._entries._entries.values()}
    assert cache._by_key_id.keys() == held


@pytest.mark.parametrize("grant_bytes", [20_000, 300_000])
def test_the_resource_memo_is_bounded_in_bytes(grant_bytes: int) -> None:
    memo = ResourceMemo(max_entries=10_000, max_bytes=MIB)
    for n in range(100):
        chain = [{"cedarberg.readers": "analysts", "note": "n" * grant_bytes}]
        resource = memo.namespace("w", (f"ns{n}",), chain)
        assert resource.name is None or resource.namespace == (f"ns{n}",)
        assert memo.estimated_bytes <= MIB
    if grant_bytes > 256 * 1024:
        assert len(memo) == 0  # each over the entry cap: built per request, never kept
    else:
        assert 0 < len(memo) < 100


@pytest.mark.parametrize(
    ("serving", "key_cache", "expected"),
    [
        (True, {"max_age_seconds": 30.0}, (5 * MIB, 30.0)),
        (True, {"max_entries": 0}, (0, None)),  # data keys always reach the KMS: no plaintext kept
        (False, {}, (0, None)),  # CLI commands keep nothing
    ],
)
async def test_the_parsed_metadata_cache_follows_its_setting_and_the_data_key_cache(
    tmp_path: Path, serving: bool, key_cache: dict[str, float], expected: tuple[int, float | None]
) -> None:
    settings = Settings.model_validate(
        {"data_dir": tmp_path, "cache": {"parsed_metadata_max_bytes": 5 * MIB}, "kms": {"cache": key_cache}}
    )
    ctx = await open_catalog(settings, serving=serving)
    try:
        max_bytes, max_age = expected
        assert ctx.parsed_metadata.max_bytes == max_bytes
        if max_age is not None:
            assert ctx.parsed_metadata.max_age_seconds == max_age
    finally:
        await close_catalog(ctx)
