"""API keys: format, storage, Argon2id verification with cache and lockout, management.

Everything runs against real SQLite files (one test on PostgreSQL). Hash work is measured with
the authenticator's own `hash_count` metric, which the hasher increments for every Argon2 hash or
verify it actually runs. Argon2id with default parameters costs about 0.1 s here, so each test
keeps its hash count small.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.connect import open_store
from cedarberg.gateway.authn.api_keys import (
    ApiKeyAuthenticator,
    ApiKeyRevokedError,
    InvalidApiKeyRequestError,
    NoSuchApiKeyError,
)
from cedarberg.gateway.authn.errors import GENERIC_MESSAGE, AuthenticationError
from cedarberg.gateway.authn.key_format import (
    KEY_LENGTH,
    MalformedKeyError,
    generate_key,
    new_key_id,
    new_secret,
    parse_api_key,
    parse_parts,
)
from cedarberg.gateway.authn.key_guards import Lockout, VerifiedCache
from cedarberg.gateway.authn.key_store import KeyStore, connect_key_store, open_key_store
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.config.authn import ApiKeySettings
from tests.support.ports import free_port


def _sqlite_url(tmp_path: Path, name: str = "keys.db") -> str:
    return f"sqlite+aiosqlite:///{tmp_path / name}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[KeyStore]:
    key_store = await open_key_store(_sqlite_url(tmp_path))
    yield key_store
    await key_store.close()


@pytest.fixture
def keys(store: KeyStore) -> ApiKeyAuthenticator:
    return ApiKeyAuthenticator(
        store, ApiKeySettings(lockout_threshold=3, failure_window_seconds=60, lockout_seconds=1.0)
    )


def _split(plaintext: str) -> tuple[str, str]:
    parsed = parse_api_key(plaintext)
    return parsed.key_id, parsed.secret


async def _rejected(keys: ApiKeyAuthenticator, presented: str) -> None:
    with pytest.raises(AuthenticationError) as caught:
        await keys.authenticate(presented)
    assert str(caught.value) == GENERIC_MESSAGE


def _database_bytes(directory: Path) -> bytes:
    """The SQLite database with its WAL, as bytes on disk."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("keys.db*")))


# -- format ------------------------------------------------------------------------------------


def test_generated_keys_parse_back() -> None:
    seen = set()
    for _ in range(200):
        key = generate_key()
        presented = key.presented
        assert len(presented) == KEY_LENGTH == 64
        assert presented.startswith("cbk_")
        assert parse_api_key(presented) == key
        assert parse_parts(key.key_id, key.secret) == key
        seen.add(presented)
    assert len(seen) == 200
    assert key.secret not in repr(key)
    assert key.secret not in str(key)


_MALFORMED = {
    "empty": "",
    "prefix-only": "cbk_",
    "scheme-included": "Bearer cbk_" + "a" * 60,
    "wrong-prefix": "xyz_" + new_key_id() + "_" + new_secret(),
    "uppercase-id": "cbk_" + new_key_id().upper() + "_" + new_secret(),
    "id-outside-base32": "cbk_" + new_key_id()[:-1] + "1_" + new_secret(),
    "wrong-separator": "cbk_" + new_key_id() + "-" + new_secret(),
    "padded-secret": "cbk_" + new_key_id() + "_" + new_secret()[:-1] + "=",
    "non-canonical-secret": "cbk_" + new_key_id() + "_" + new_secret()[:-1] + "B",
    "too-long": "cbk_" + new_key_id() + "_" + new_secret() + "A",
    "too-short": "cbk_" + new_key_id() + "_" + new_secret()[:-1],
    "non-ascii": "cbk_" + new_key_id() + "_" + new_secret()[:-1] + "é",
    "leading-space": " cbk_" + new_key_id() + "_" + new_secret()[1:],
    "newline": "cbk_" + new_key_id() + "_" + new_secret()[:-1] + "\n",
    "huge": "x" * 1_000_000,
}


@pytest.mark.parametrize("presented", list(_MALFORMED.values()), ids=list(_MALFORMED))
def test_malformed_keys_are_refused(presented: str) -> None:
    with pytest.raises(MalformedKeyError) as caught:
        parse_api_key(presented)
    assert str(caught.value) == "malformed key"


def test_the_secret_may_contain_the_separator() -> None:
    key_id = new_key_id()
    secret = "_" * 42 + "A"
    assert parse_api_key(f"cbk_{key_id}_{secret}").secret == secret


async def test_malformed_keys_cost_no_lookup_and_no_hash() -> None:
    # A store whose database does not exist: any lookup would raise StorageUnavailableError.
    store = connect_key_store(f"postgresql+asyncpg://nobody@127.0.0.1:{free_port()}/none")
    keys = ApiKeyAuthenticator(store)
    try:
        for presented in ["", "cbk_short", "cbk_" + "A" * 60, "x" * 100_000]:
            await _rejected(keys, presented)
        with pytest.raises(StorageUnavailableError):
            await keys.authenticate(generate_key().presented)
    finally:
        await store.close()
    assert keys.hash_count == 0


# -- authentication ----------------------------------------------------------------------------


async def test_create_then_authenticate_then_cached(keys: ApiKeyAuthenticator) -> None:
    record, plaintext = await keys.create_key(
        "etl-bot", PrincipalKind.SERVICE, ["writers", "readers", "writers"], description="nightly"
    )
    assert keys.hash_count == 1
    assert record.groups == ("readers", "writers")
    assert plaintext.startswith(f"cbk_{record.key_id}_")

    started = time.perf_counter()
    principal = await keys.authenticate(plaintext)
    first = time.perf_counter() - started
    assert keys.hash_count == 2
    assert principal.id == "key:etl-bot"
    assert principal.kind is PrincipalKind.SERVICE
    assert principal.groups == frozenset({"readers", "writers"})
    assert principal.auth_method is AuthMethod.API_KEY
    assert principal.attributes == {"api_key_id": record.key_id}

    started = time.perf_counter()
    for _ in range(100):
        assert await keys.authenticate(plaintext) == principal
    cached = (time.perf_counter() - started) / 100
    assert keys.hash_count == 2
    assert cached < first / 20, (cached, first)


async def test_concurrent_first_uses_share_one_hash(keys: ApiKeyAuthenticator) -> None:
    _record, plaintext = await keys.create_key("spark", PrincipalKind.SERVICE, ["readers"])
    before = keys.hash_count
    principals = await asyncio.gather(*(keys.authenticate(plaintext) for _ in range(20)))
    assert {p.id for p in principals} == {"key:spark"}
    assert keys.hash_count == before + 1


async def test_hashing_runs_off_the_event_loop(keys: ApiKeyAuthenticator) -> None:
    _record, plaintext = await keys.create_key("alice", PrincipalKind.USER)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.002)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    await keys.authenticate(plaintext)
    elapsed = time.perf_counter() - started
    task.cancel()
    # The loop kept ticking while Argon2 ran in a worker thread.
    assert ticks >= max(5, int(elapsed / 0.002 / 10)), (ticks, elapsed)


async def test_unknown_id_is_rejected_without_hashing(keys: ApiKeyAuthenticator) -> None:
    await keys.create_key("alice", PrincipalKind.USER)
    before = keys.hash_count
    for _ in range(50):
        await _rejected(keys, generate_key().presented)
    assert keys.hash_count == before


async def test_wrong_secret_is_rejected_and_the_right_one_still_works(keys: ApiKeyAuthenticator) -> None:
    record, plaintext = await keys.create_key("alice", PrincipalKind.USER)
    before = keys.hash_count
    await _rejected(keys, f"cbk_{record.key_id}_{new_secret()}")
    assert keys.hash_count == before + 1
    assert (await keys.authenticate(plaintext)).id == "key:alice"


async def test_expired_key_is_rejected_even_when_cached(keys: ApiKeyAuthenticator) -> None:
    expires = datetime.now(UTC) + timedelta(seconds=3)
    record, plaintext = await keys.create_key("temp", PrincipalKind.USER, expires_at=expires)
    assert record.expires_at is not None
    assert abs((record.expires_at - expires).total_seconds()) < 0.001
    await keys.authenticate(plaintext)
    hashes = keys.hash_count
    await asyncio.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.05)
    await _rejected(keys, plaintext)  # cached entry honours the expiry
    await _rejected(keys, plaintext)  # and the stored record does too, without hashing
    assert keys.hash_count == hashes
    assert (await keys.get_key(record.key_id)).is_expired(datetime.now(UTC))


async def test_revoke_evicts_the_cache(keys: ApiKeyAuthenticator) -> None:
    record, plaintext = await keys.create_key("alice", PrincipalKind.USER, ["admins"])
    await keys.authenticate(plaintext)
    assert keys.cached_keys == 1
    revoked = await keys.revoke_key(record.key_id)
    assert revoked.revoked_at is not None
    assert keys.cached_keys == 0
    hashes = keys.hash_count
    await _rejected(keys, plaintext)
    assert keys.hash_count == hashes  # a revoked key costs no hash
    again = await keys.revoke_key(record.key_id)  # idempotent
    assert again.revoked_at == revoked.revoked_at
    with pytest.raises(NoSuchApiKeyError):
        await keys.revoke_key(new_key_id())


async def test_revocation_elsewhere_takes_effect_within_the_cache_ttl(store: KeyStore) -> None:
    # Two authenticators on one database stand for two gateway processes.
    here = ApiKeyAuthenticator(store, ApiKeySettings(cache_ttl_seconds=1.0))
    elsewhere = ApiKeyAuthenticator(store)
    record, plaintext = await elsewhere.create_key("alice", PrincipalKind.USER)
    await here.authenticate(plaintext)
    await elsewhere.revoke_key(record.key_id)
    await here.authenticate(plaintext)  # still cached here: documented bound
    await asyncio.sleep(1.05)
    await _rejected(here, plaintext)


async def test_change_feed_carries_revocations_and_rotations_to_other_processes(store: KeyStore) -> None:
    # Two authenticators on one database stand for two gateway processes; `here` follows the feed.
    here = ApiKeyAuthenticator(store, ApiKeySettings(change_poll_seconds=60))
    elsewhere = ApiKeyAuthenticator(store)
    revoked, revoked_key = await elsewhere.create_key("alice", PrincipalKind.USER)
    rotated, rotated_key = await elsewhere.create_key("bob", PrincipalKind.USER)
    await here.start_change_feed()
    try:
        await here.authenticate(revoked_key)
        await here.authenticate(rotated_key)
        assert here.cached_keys == 2
        await elsewhere.revoke_key(revoked.key_id)
        _, new_secret_key = await elsewhere.rotate_key(rotated.key_id)
        await here.authenticate(revoked_key)  # not polled yet: still cached here (the bound)
        assert await here.poll_changes() == 2
        assert here.cached_keys == 0
        await _rejected(here, revoked_key)
        await _rejected(here, rotated_key)
        assert (await here.authenticate(new_secret_key)).id == "key:bob"
        assert await here.poll_changes() == 0  # the cursor moved on: nothing is applied twice
        assert here.cached_keys == 1
    finally:
        await here.aclose()


async def test_the_feed_is_polled_in_the_background(store: KeyStore) -> None:
    here = ApiKeyAuthenticator(store, ApiKeySettings(change_poll_seconds=0.1))
    elsewhere = ApiKeyAuthenticator(store)
    record, plaintext = await elsewhere.create_key("alice", PrincipalKind.USER)
    await here.start_change_feed()
    try:
        await here.authenticate(plaintext)
        await elsewhere.revoke_key(record.key_id)
        revoked_at = time.monotonic()
        for _ in range(250):  # at most 5 s
            if not here.cached_keys:
                break
            await asyncio.sleep(0.02)
        assert here.cached_keys == 0
        assert time.monotonic() - revoked_at < 1.0
        await _rejected(here, plaintext)
    finally:
        await here.aclose()


async def test_an_unread_feed_stops_trusting_the_cache(store: KeyStore) -> None:
    # Polls of 0.4 s: the checks after `poll_changes` must fit inside 5 of them on a busy machine.
    here = ApiKeyAuthenticator(store, ApiKeySettings(change_poll_seconds=0.4))
    _, plaintext = await here.create_key("alice", PrincipalKind.USER)
    await here.start_change_feed()
    await here.authenticate(plaintext)
    hashes = here.hash_count
    await here.authenticate(plaintext)
    assert here.hash_count == hashes  # fresh feed: served from the cache
    await here.aclose()  # the feed is no longer read (as when the store cannot be reached)
    await asyncio.sleep(2.2)  # more than 5 poll intervals
    assert (await here.authenticate(plaintext)).id == "key:alice"
    assert here.hash_count == hashes + 1  # verified against the store again, not trusted blindly
    await here.poll_changes()  # the feed is readable again: the cache is trusted again
    await here.authenticate(plaintext)
    await here.authenticate(plaintext)
    assert here.hash_count == hashes + 2


async def test_the_feed_prunes_old_entries(tmp_path: Path, store: KeyStore) -> None:
    keys = ApiKeyAuthenticator(store)
    old, _ = await keys.create_key("alice", PrincipalKind.USER)
    new, _ = await keys.create_key("bob", PrincipalKind.USER)
    assert await store.revoke(old.key_id, datetime.now(UTC) - timedelta(days=2)) == 1
    assert [change.key_id for change in await store.changes_after(0)] == [old.key_id]
    await keys.revoke_key(new.key_id)
    assert [change.key_id for change in await store.changes_after(0)] == [new.key_id]
    assert await store.latest_change() == (await store.changes_after(0))[0].id


async def test_repeated_failures_lock_the_id_out_without_hashing(keys: ApiKeyAuthenticator) -> None:
    record, plaintext = await keys.create_key("alice", PrincipalKind.USER)
    before = keys.hash_count
    for _ in range(3):  # the fixture's threshold
        await _rejected(keys, f"cbk_{record.key_id}_{new_secret()}")
    assert keys.hash_count == before + 3
    locked_at = time.monotonic()
    for _ in range(20):
        await _rejected(keys, f"cbk_{record.key_id}_{new_secret()}")
    await _rejected(keys, plaintext)  # even the right secret waits out the lockout
    assert keys.hash_count == before + 3
    await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - locked_at)) + 0.05)
    assert (await keys.authenticate(plaintext)).id == "key:alice"
    assert keys.hash_count == before + 4


async def test_concurrent_guesses_cannot_overshoot_the_threshold(keys: ApiKeyAuthenticator) -> None:
    record, _plaintext = await keys.create_key("alice", PrincipalKind.USER)
    before = keys.hash_count
    guesses = [keys.authenticate(f"cbk_{record.key_id}_{new_secret()}") for _ in range(12)]
    results = await asyncio.gather(*guesses, return_exceptions=True)
    assert all(isinstance(r, AuthenticationError) for r in results)
    assert keys.hash_count - before <= 3


async def test_a_cached_key_keeps_working_while_its_id_is_locked_out(keys: ApiKeyAuthenticator) -> None:
    record, plaintext = await keys.create_key("alice", PrincipalKind.USER)
    await keys.authenticate(plaintext)
    for _ in range(4):
        await _rejected(keys, f"cbk_{record.key_id}_{new_secret()}")
    hashes = keys.hash_count
    assert (await keys.authenticate(plaintext)).id == "key:alice"
    assert keys.hash_count == hashes


async def test_failures_are_logged_without_key_material(
    keys: ApiKeyAuthenticator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cedarberg.authn.api_keys")
    record, plaintext = await keys.create_key("alice", PrincipalKind.USER)
    wrong = f"cbk_{record.key_id}_{new_secret()}"
    unknown = generate_key().presented
    for presented in [wrong, unknown, "cbk_garbage"]:
        await _rejected(keys, presented)
    await keys.authenticate(plaintext)
    await keys.revoke_key(record.key_id)
    await _rejected(keys, plaintext)
    text = caplog.text
    assert "wrong secret" in text
    assert "unknown id" in text
    assert "malformed" in text
    assert "revoked" in text
    assert record.key_id in text
    for secret in (_split(plaintext)[1], _split(wrong)[1], _split(unknown)[1]):
        assert secret not in text


def test_lockout_counts_within_the_window_and_expires() -> None:
    lockout = Lockout(threshold=2, window_seconds=10, duration_seconds=5, max_tracked=100)
    assert lockout.begin("a", 0)
    lockout.finish("a", False, 0)
    assert not lockout.is_locked("a", 1)
    assert lockout.begin("a", 11)  # the first failure fell out of the window
    lockout.finish("a", False, 11)
    assert not lockout.is_locked("a", 11)
    assert lockout.begin("a", 12)
    lockout.finish("a", False, 12)  # two failures within 10 s: locked until 17
    assert lockout.is_locked("a", 12.1)
    assert not lockout.begin("a", 16.9)
    assert not lockout.is_locked("a", 17)
    assert lockout.begin("a", 17)
    assert lockout.begin("a", 17)
    assert not lockout.begin("a", 17)  # two verifications in flight reach the threshold
    lockout.finish("a", True, 18)
    lockout.finish("a", True, 18)
    assert not lockout.is_locked("a", 18)
    assert not lockout.is_locked("never-seen", 0)


def test_verified_cache_ttl_bound_and_eviction() -> None:
    cache = VerifiedCache(max_entries=2, ttl_seconds=10)
    principal = Principal("p", PrincipalKind.USER, frozenset(), AuthMethod.API_KEY)
    digests = [cache.digest(f"key-{i}") for i in range(3)]
    assert cache.digest("key-0") == digests[0] != hashlib.sha256(b"key-0").digest()  # keyed
    start = time.monotonic()
    cache.remember(digests[0], principal, "id0", None)
    cache.remember(digests[1], principal, "id1", 100.0)
    assert cache.get(digests[0], now_mono=start + 9, now_wall=0) is not None
    assert cache.get(digests[1], now_mono=start + 1, now_wall=100) is None  # the key itself expired
    cache.remember(digests[1], principal, "id1", None)
    cache.remember(digests[2], principal, "id1", None)  # pushes out the LRU
    assert len(cache) == 2
    assert cache.get(digests[0], now_mono=start + 1, now_wall=0) is None
    assert cache.get(digests[2], now_mono=time.monotonic() + 10, now_wall=0) is None  # ttl over
    cache.evict_key("id1")
    assert len(cache) == 0


# -- management --------------------------------------------------------------------------------


async def test_rotate_keeps_the_id_and_replaces_the_secret(keys: ApiKeyAuthenticator) -> None:
    record, old = await keys.create_key("alice", PrincipalKind.USER, ["readers"])
    await keys.authenticate(old)
    rotated, new = await keys.rotate_key(record.key_id)
    assert rotated.key_id == record.key_id
    assert rotated.rotated_at is not None
    assert rotated.groups == record.groups
    assert new != old
    assert new.startswith(f"cbk_{record.key_id}_")
    await _rejected(keys, old)
    assert (await keys.authenticate(new)).groups == frozenset({"readers"})
    await keys.revoke_key(record.key_id)
    with pytest.raises(ApiKeyRevokedError):
        await keys.rotate_key(record.key_id)
    with pytest.raises(NoSuchApiKeyError):
        await keys.rotate_key(new_key_id())


async def test_list_and_get_never_show_secrets(tmp_path: Path, keys: ApiKeyAuthenticator) -> None:
    created = [
        await keys.create_key("alice", PrincipalKind.USER, ["admins"]),
        await keys.create_key("alice", PrincipalKind.USER, ["readers"]),
        await keys.create_key("bot", PrincipalKind.SERVICE, description="ci"),
    ]
    secrets = [_split(plaintext)[1] for _record, plaintext in created]

    listed = await keys.list_keys()
    assert [r.key_id for r in listed] == sorted(r.key_id for r, _ in created)
    assert {r.key_id for r in await keys.list_keys(principal="alice")} == {
        created[0][0].key_id,
        created[1][0].key_id,
    }
    first = await keys.list_keys(limit=2)
    rest = await keys.list_keys(after=first[-1].key_id, limit=2)
    assert [r.key_id for r in first + rest] == [r.key_id for r in listed]

    fetched = await keys.get_key(created[2][0].key_id)
    assert fetched.to_json()["description"] == "ci"
    assert set(fetched.to_json()) == {
        "id",
        "principal",
        "kind",
        "groups",
        "created_at",
        "expires_at",
        "revoked_at",
        "rotated_at",
        "previous_secret_expires_at",
        "description",
        "summary",
    }
    shown = repr(listed) + repr([r.to_json() for r in listed]) + repr(fetched)
    assert "argon2" not in shown
    for secret in secrets:
        assert secret not in shown
    with pytest.raises(NoSuchApiKeyError):
        await keys.get_key(new_key_id())

    # The database holds Argon2id hashes and never a secret.
    with sqlite3.connect(tmp_path / "keys.db") as db:
        hashes = [row[0] for row in db.execute("SELECT secret_hash FROM api_keys")]
    assert len(hashes) == 3
    assert all(h.startswith("$argon2id$") for h in hashes)
    raw = _database_bytes(tmp_path)
    for secret in secrets:
        assert secret.encode() not in raw


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("", PrincipalKind.USER), {}),
        ((" alice", PrincipalKind.USER), {}),
        (("al\x00ice", PrincipalKind.USER), {}),
        (("a" * 257, PrincipalKind.USER), {}),
        (("anon", PrincipalKind.ANONYMOUS), {}),
        (("alice", PrincipalKind.USER, ["ok", "bad\n"]), {}),
        (("alice", PrincipalKind.USER, "admins"), {}),
        (("alice", PrincipalKind.USER, [f"g{i}" for i in range(65)]), {}),
        (("alice", PrincipalKind.USER), {"description": "x" * 1025}),
        (("alice", PrincipalKind.USER), {"expires_at": datetime.now(UTC) - timedelta(seconds=1)}),
        (("alice", PrincipalKind.USER), {"expires_at": datetime(2099, 1, 1)}),  # naive
    ],
)
async def test_invalid_create_requests(
    keys: ApiKeyAuthenticator, args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    with pytest.raises(InvalidApiKeyRequestError):
        await keys.create_key(*args, **kwargs)  # type: ignore[arg-type]
    assert keys.hash_count == 0
    assert await keys.list_keys() == []


def test_settings_are_frozen_and_validated() -> None:
    settings = ApiKeySettings()
    assert settings.lockout_threshold == 5
    assert settings.lockout_seconds == 300
    with pytest.raises(ValidationError):
        settings.cache_size = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ApiKeySettings(hash_concurrency=0)
    with pytest.raises(ValidationError):
        ApiKeySettings(no_such_setting=1)  # type: ignore[call-arg]


# -- storage -----------------------------------------------------------------------------------


async def test_the_key_tables_are_in_the_registrys_one_migration_history(tmp_path: Path) -> None:
    url = _sqlite_url(tmp_path, "shared.db")
    catalog = await open_store(url)
    first = await open_key_store(url)
    await first.close()
    again = await open_key_store(url)  # idempotent
    record, plaintext = await ApiKeyAuthenticator(again).create_key("alice", PrincipalKind.USER)
    await again.close()
    await catalog.close()
    reopened = await open_store(url)  # the same history, already at head
    await reopened.close()
    with sqlite3.connect(tmp_path / "shared.db") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = db.execute("SELECT version_num FROM alembic_version").fetchall()
    assert {"api_keys", "namespaces", "alembic_version"} <= tables
    assert "alembic_version_gateway" not in tables  # one version table per database
    assert version == [("0015",)]
    store = await open_key_store(url)
    try:
        assert (await ApiKeyAuthenticator(store).authenticate(plaintext)).id == "key:alice"
        assert (await ApiKeyAuthenticator(store).get_key(record.key_id)).principal == "alice"
    finally:
        await store.close()


async def test_postgres_store(postgres_url: str) -> None:
    catalog = await open_store(postgres_url)
    stores = await asyncio.gather(open_key_store(postgres_url), open_key_store(postgres_url))
    try:
        keys = ApiKeyAuthenticator(stores[0], ApiKeySettings(lockout_threshold=2))
        other = ApiKeyAuthenticator(stores[1])
        expires = datetime.now(UTC) + timedelta(days=1)
        record, plaintext = await keys.create_key(
            "alice", PrincipalKind.USER, ["admins"], expires_at=expires, description="pg"
        )
        fetched = await other.get_key(record.key_id)
        assert fetched == record
        assert fetched.expires_at == expires
        assert (await other.authenticate(plaintext)).groups == frozenset({"admins"})
        rotated, new = await keys.rotate_key(record.key_id)
        await _rejected(keys, plaintext)
        assert (await keys.authenticate(new)).id == "key:alice"
        await keys.revoke_key(record.key_id)
        await _rejected(ApiKeyAuthenticator(stores[1]), new)
        listed = await other.list_keys(principal="alice")
        assert [r.key_id for r in listed] == [record.key_id]
        assert listed[0].revoked_at is not None
        assert rotated.rotated_at is not None
    finally:
        for store in stores:
            await store.close()
        await catalog.close()
