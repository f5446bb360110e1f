"""The gateway's read-path caches: verified bearer tokens, Cedar decisions, memoised resources."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cedarberg.gateway.authn.credential import KeyLease
from cedarberg.gateway.authn.key_guards import VerifiedCache
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.token_cache import VerifiedTokenCache
from cedarberg.gateway.authz import entities
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.resource_memo import ResourceMemo
from tests.support.gateway import bundled_policies

ANALYST = Principal("ann", PrincipalKind.USER, frozenset({"analysts"}), AuthMethod.API_KEY)
KEY = Ed25519PrivateKey.generate()


def _token(**claims: float) -> str:
    return jwt.encode({"sub": "ann", **claims}, KEY, algorithm="EdDSA")


def test_a_verified_token_is_kept_until_it_expires_and_not_before_nbf() -> None:
    cache = VerifiedTokenCache()
    now = time.time()
    live, expiring, early = _token(exp=now + 60), _token(exp=now + 0.05), _token(nbf=now + 60, exp=now + 120)
    for token in (live, expiring, early):
        cache.put(token, ANALYST)
    assert cache.get(live) is ANALYST
    assert cache.get(early) is None
    time.sleep(0.06)
    assert cache.get(expiring) is None
    assert cache.get(_token(exp=now + 60, jti=1)) is None  # another token, never verified


def test_the_token_cache_holds_no_token_and_is_bounded() -> None:
    cache = VerifiedTokenCache(max_entries=2)
    tokens = [_token(exp=time.time() + 60, n=n) for n in range(3)]
    for token in tokens:
        cache.put(token, ANALYST)
    assert len(cache) == 2
    assert cache.get(tokens[0]) is None
    held = repr(list(cache._entries))
    assert not any(token in held or token.split(".")[1] in held for token in tokens)
    assert VerifiedTokenCache(max_entries=0).get(tokens[2]) is None


def _lease(principal: Principal) -> KeyLease:
    assert principal.proof is not None
    return principal.proof.lease


def test_a_verified_keys_lease_holds_exactly_while_its_cache_entry_is_a_hit() -> None:
    """Request plans of an API key live by this lease (`gateway.web.replay`): it must end with the
    entry, whichever way the entry ends, and never be current for a verification not cached."""
    cache = VerifiedCache(max_entries=10, ttl_seconds=0.2)
    kept = cache.remember(cache.digest("a"), ANALYST, "ka", time.time() + 60)
    assert _lease(kept).current  # control
    assert kept.valid_until is not None
    assert kept == ANALYST
    expiring = cache.remember(cache.digest("b"), ANALYST, "kb", None)
    time.sleep(0.25)
    assert not _lease(expiring).current  # past the TTL: as `get` would no longer answer it
    assert cache.get(cache.digest("b"), time.monotonic(), time.time()) is None
    fresh = [cache.remember(cache.digest(k), ANALYST, k, None) for k in ("c", "d")]
    cache.evict_key("c")  # a rotation or revocation of key c
    assert not _lease(fresh[0]).current
    assert _lease(fresh[1]).current
    cache.clear()  # a stale change feed's clear
    assert not _lease(fresh[1]).current
    raced = cache.remember(cache.digest("e"), ANALYST, "e", None, keep=False)  # a rotation raced it
    assert not _lease(raced).current
    assert cache.get(cache.digest("e"), time.monotonic(), time.time()) is None
    full = VerifiedCache(max_entries=1, ttl_seconds=60)
    first = full.remember(full.digest("f"), ANALYST, "f", None)
    full.remember(full.digest("g"), ANALYST, "g", None)  # evicts f
    assert not _lease(first).current
    off = VerifiedCache(max_entries=0, ttl_seconds=60)
    assert not _lease(off.remember(off.digest("h"), ANALYST, "h", None)).current


def _engine(tmp_path: Path) -> tuple[PolicyEngine, Path]:
    directory = tmp_path / "policies"
    bundled_policies(directory)
    engine = PolicyEngine(directory)
    engine.load()
    return engine, directory


def _table(readers: str) -> entities.Resource:
    namespace = entities.namespace_resource("w", ("sales",), [{"cedarberg.readers": readers}])
    return entities.child_table(namespace, "orders")


def test_decisions_are_reused_and_keyed_by_grants_principal_and_context(tmp_path: Path) -> None:
    engine, _ = _engine(tmp_path)
    context = RequestContext.of(ANALYST, "127.0.0.1")
    assert engine.decide(ANALYST, "loadTable", _table("analysts"), context).allowed
    hits = engine.decision_hits
    assert engine.decide(ANALYST, "loadTable", _table("analysts"), context).allowed
    assert engine.decision_hits == hits + 1
    # A different grant, group or context is a different key, decided anew.
    assert not engine.decide(ANALYST, "loadTable", _table("bi"), context).allowed
    outsider = Principal("ann", PrincipalKind.USER, frozenset({"bi"}), AuthMethod.API_KEY)
    assert not engine.decide(outsider, "loadTable", _table("analysts"), context).allowed
    assert engine.decision_hits == hits + 1


def test_a_policy_reload_is_never_answered_from_old_decisions(tmp_path: Path) -> None:
    engine, directory = _engine(tmp_path)
    context = RequestContext.of(ANALYST, "127.0.0.1")
    assert engine.decide(ANALYST, "loadTable", _table("analysts"), context).allowed
    (directory / "freeze.cedar").write_text(
        '@id("frozen")\nforbid (principal in Cedarberg::Group::"analysts", action, resource);\n'
    )
    engine.reload()
    denied = engine.decide(ANALYST, "loadTable", _table("analysts"), context)
    assert not denied.allowed
    assert denied.policy_ids == ("frozen",)


def test_a_memoised_resource_is_rebuilt_when_its_grants_object_changes() -> None:
    memo = ResourceMemo()
    grants = {"cedarberg.readers": "analysts"}
    first = memo.namespace("w", ("sales",), [grants])
    assert memo.namespace("w", ("sales",), [grants]) is first
    changed = memo.namespace("w", ("sales",), [{"cedarberg.readers": "bi"}])
    assert changed is not first
    assert changed.grants != first.grants
    assert memo.child(changed, "orders", view=False) is memo.child(changed, "orders", view=False)
    assert memo.child(first, "orders", view=False).parent is first
