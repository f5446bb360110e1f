"""API keys: authentication (`ApiKeyAuthenticator.authenticate`) and management (create, list,
get, rotate, revoke) for the admin API and the CLI.

Format `cbk_<id>_<secret>` (see `gateway.authn.key_format`); records in the `api_keys` table (see
`gateway.authn.key_store`); hasher, cache and lockout in `gateway.authn.key_guards`.

Public API::

    store = await open_key_store(url)                       # migrated; connect_key_store(url): as is
    keys = ApiKeyAuthenticator(store, ApiKeySettings())
    principal = await keys.authenticate("cbk_...", client)  # raises AuthenticationError
    principal = await keys.authenticate_parts(key_id, secret, client)   # OAuth2 client id / secret
    principal = await keys.active_principal(key_id, generation)   # no secret, no hash (token refresh)
    await keys.check_token(principal)                       # a gateway token's key cut-off
    record, plaintext = await keys.create_key(principal, kind, groups, expires_at, description)
    records = await keys.list_keys(principal=None, after=None, limit=100)
    record = await keys.get_key(key_id)                     # raises NoSuchApiKeyError
    record, plaintext = await keys.rotate_key(key_id, overlap_seconds=0)   # same id, new secret
    record = await keys.revoke_key(key_id)                  # idempotent
    keys.hash_count                                         # Argon2 operations run so far

Verification order in `authenticate`, cheapest first; each step rejects without doing the next:
1. strict parse (length, charset, canonical base64): malformed keys cost no lookup and no hash;
2. the verified-key cache: a key that verified before within the TTL costs no lookup and no hash;
3. lockout of the key id *for this client* (`client`: the caller's address as the rate limiter
   keys it): a locked-out (key id, client) pair costs no lookup and no hash. Failures are counted
   per key id and client, so someone who knows a key id (it is the OAuth2 client id, not a
   secret) locks out only their own address, never the owner presenting the right secret from
   elsewhere;
4. one primary-key lookup: an unknown, revoked or expired key costs no hash;
5. Argon2id verification, once per distinct presented key even when many requests carrying it
   arrive together (they share one verification).
Every failure raises the same `AuthenticationError`; the reason is logged at INFO with the key id
only (never the secret or the whole key).

Rotation keeps the key id and replaces the secret: the old secret stops working at once in this
process (its cache entries are evicted), unless the rotation gives it an overlap window
(`overlap_seconds`, at most `max_rotation_overlap_seconds`): then the old secret, now the key's
previous one, keeps working until the window ends and never after (a cached verification of it
expires then; a gateway token it proves lives no longer; see `gateway.authn.key_cutoffs`). Only
one previous secret is kept: a second rotation ends the first one's window. Revocation ends both
secrets at once. During a window both hashes are always verified, whichever secret is presented,
so the time taken does not tell which one matched (it tells only that the key is in a window).
Other gateway processes learn of rotations and revocations through the change feed
(`KeyStore.changes_after`), which `start_change_feed` polls every `change_poll_seconds`: a
revoked or rotated key is refused everywhere within that interval (plus one store round trip).
The feed fails closed: while it cannot be read for `_STALE_POLLS` intervals, cached
verifications are not trusted (every request goes to the store), and after such a gap the whole
cache is dropped, since feed entries may have been pruned.
Expiry is enforced on every request, cached or not.

Token cut-off: every rotation and revocation bumps the key's generation (in the same transaction
as the change feed entry that carries it). Gateway tokens carry the generation of the key that
proved them; `check_token` refuses a token older than the newest generation this process knows
(from its own writes and the feed; at start-up it reads the whole retained feed, which outlives
every token). So a rotation or revocation ends every token issued before it, on every process,
within `change_poll_seconds`. While the feed is stale, `check_token` asks the store instead
(failing closed: a store that cannot answer refuses the token).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.key_cutoffs import Cutoff
from cedarberg.gateway.authn.key_format import (
    MalformedKeyError,
    ParsedKey,
    generate_key,
    parse_api_key,
    parse_parts,
)
from cedarberg.gateway.authn.key_guards import Lockout, SecretHasher, VerifiedCache
from cedarberg.gateway.authn.key_record import ApiKeyRecord
from cedarberg.gateway.authn.key_store import KeyIdTakenError, KeyStore
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind, key_principal_id
from cedarberg.gateway.config.authn import ApiKeySettings

log = logging.getLogger("cedarberg.authn.api_keys")

MAX_GROUPS = 64
MAX_NAME_LENGTH = 256
MAX_DESCRIPTION_LENGTH = 1024
MAX_LIST_LIMIT = 1000
_STALE_POLLS = 5  # missed feed polls after which cached verifications are no longer trusted
_FEED_BATCH = 1000
_FEED_STOP_SECONDS = 5.0
_NO_CHANGE = Cutoff(0)  # a key with no change within the feed's retention: every generation is good


class ApiKeyError(Exception):
    """Base of the management errors."""


class NoSuchApiKeyError(ApiKeyError):
    pass


class ApiKeyRevokedError(ApiKeyError):
    """The key is revoked and cannot be rotated."""


class InvalidApiKeyRequestError(ApiKeyError, ValueError):
    """A management request with an invalid principal, kind, group, expiry or description."""


def _clean_name(value: str, what: str) -> str:
    if not value or len(value) > MAX_NAME_LENGTH or value != value.strip():
        raise InvalidApiKeyRequestError(f"{what} must be 1-{MAX_NAME_LENGTH} characters, not padded")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise InvalidApiKeyRequestError(f"{what} must not contain control characters")
    return value


def _principal(record: ApiKeyRecord, *, previous: bool = False) -> Principal:
    """The key's principal; with `previous`, as proved by its previous secret (during an overlap):
    of the generation before, and good only until the overlap ends."""
    until = record.previous_secret_until
    return Principal(
        id=key_principal_id(record.principal),
        kind=record.kind,
        groups=frozenset(record.groups),
        auth_method=AuthMethod.API_KEY,
        attributes={"api_key_id": record.key_id},
        key_generation=record.generation - 1 if previous else record.generation,
        key_secret_until=until.timestamp() if previous and until is not None else None,
    )


def _lockout_subject(key_id: str, client: str) -> str:
    """What failures are counted under: the key id and the client (key ids never contain a
    space, so distinct pairs never share a subject)."""
    return f"{key_id} {client}"


class ApiKeyAuthenticator:
    """Verifies API keys and manages them. One instance per process (it holds the cache)."""

    def __init__(self, store: KeyStore, settings: ApiKeySettings | None = None) -> None:
        self._store = store
        self._settings = settings or ApiKeySettings()
        self._hasher = SecretHasher(self._settings.hash_concurrency)
        self._cache = VerifiedCache(
            self._settings.cache_size, self._settings.cache_ttl_seconds, self._settings.cache_max_bytes
        )
        self._lockout = Lockout(
            self._settings.lockout_threshold,
            self._settings.failure_window_seconds,
            self._settings.lockout_seconds,
            self._settings.lockout_tracked_ids,
        )
        self._inflight: dict[bytes, asyncio.Task[Principal]] = {}
        # Bumped by every revoke and rotate (see `_forget`).
        self._epoch = 0
        self._feed_cursor = 0
        self._feed_read_at: float | None = None  # monotonic time of the last good poll; None: off
        self._feed_task: asyncio.Task[None] | None = None
        self._feed_stop = asyncio.Event()
        # Newest generation (and overlap) known per key changed within the feed's retention.
        self._cutoffs: dict[str, Cutoff] = {}

    @property
    def settings(self) -> ApiKeySettings:
        return self._settings

    @property
    def hash_count(self) -> int:
        """Argon2id hash and verify operations this instance has run (a metric)."""
        return self._hasher.hash_count

    @property
    def cached_keys(self) -> int:
        return len(self._cache)

    # -- authentication -----------------------------------------------------------------------
    async def authenticate(self, presented: str, client: str = "") -> Principal:
        """The principal a presented API key proves, for a caller at `client` (whose failures
        count toward the lockout of this key for that client only). Raises AuthenticationError."""
        try:
            key = parse_api_key(presented)
        except MalformedKeyError:
            log.info("api key rejected: malformed")
            raise AuthenticationError from None
        return await self._authenticate(key, client)

    async def authenticate_parts(self, key_id: str, secret: str, client: str = "") -> Principal:
        """As `authenticate`, for a key given as its id and secret (OAuth2 client credentials)."""
        try:
            key = parse_parts(key_id, secret)
        except MalformedKeyError:
            log.info("api key rejected: malformed")
            raise AuthenticationError from None
        return await self._authenticate(key, client)

    async def active_principal(self, key_id: str, generation: int | None = None) -> Principal:
        """The principal of a key that is still usable, without its secret and without hashing.

        For refreshing a token that was issued for this key at `generation`: reads the store, so
        a rotation or revocation anywhere refuses it at once. Raises AuthenticationError if the key
        is unknown, revoked or expired, or was rotated after `generation` (unless `generation` is
        the previous one and the rotation's overlap still runs: then the principal is of that
        generation and good only until the overlap ends).
        """
        stored = await self._store.get(key_id)
        now = datetime.now(UTC)
        if stored is None or not stored.record.is_active(now):
            log.info("api key %s rejected: unknown, revoked or expired", key_id)
            raise AuthenticationError
        record = stored.record
        if generation is not None and record.generation > generation:
            if not Cutoff.of_record(record).admits(generation, now.timestamp()):
                log.info("api key %s rejected: token issued before the key's last rotation", key_id)
                raise AuthenticationError
            return _principal(record, previous=True)
        return _principal(record)

    async def check_token(self, principal: Principal) -> None:
        """Refuse a gateway token issued for an API key before that key's last rotation or
        revocation. Principals not proved by a key pass.

        Raises AuthenticationError; StorageUnavailableError if the feed is stale and the store
        cannot answer either (fail closed)."""
        key_id = principal.attributes.get("api_key_id")
        if key_id is None:
            return
        generation = principal.key_generation or 0
        cutoff: Cutoff | None
        if self._feed_stale(time.monotonic()):
            stored = await self._store.get(key_id)
            active = stored is not None and stored.record.revoked_at is None
            cutoff = Cutoff.of_record(stored.record) if stored is not None and active else None
        else:
            cutoff = self._cutoffs.get(key_id, _NO_CHANGE)
        if cutoff is None or not cutoff.admits(generation, time.time()):
            log.info("gateway token for api key %s rejected: issued before a rotation or revocation", key_id)
            raise AuthenticationError

    def token_current(self, principal: Principal) -> bool:
        """`check_token`'s answer, when it can be given without the store: False if the
        principal's key was rotated or revoked since, or if the change feed is stale."""
        key_id = principal.attributes.get("api_key_id")
        if key_id is None:
            return True
        if self._feed_stale(time.monotonic()):
            return False
        return self._cutoffs.get(key_id, _NO_CHANGE).admits(principal.key_generation or 0, time.time())

    def _note_cutoff(self, key_id: str, cutoff: Cutoff) -> None:
        known = self._cutoffs.get(key_id)
        if known is None or cutoff.generation > known.generation:
            self._cutoffs[key_id] = cutoff

    async def _authenticate(self, key: ParsedKey, client: str) -> Principal:
        digest = self._cache.digest(key.presented)
        now = time.monotonic()
        entry = self._cache.get(digest, now, time.time())
        if entry is not None and not self._feed_stale(now):
            return entry.principal
        subject = _lockout_subject(key.key_id, client)
        if self._lockout.is_locked(subject, time.monotonic()):
            log.info("api key %s rejected: locked out after repeated failures", key.key_id)
            raise AuthenticationError
        task = self._inflight.get(digest)
        if task is None:
            # Callers presenting the very same key share one verification; its outcome counts
            # for the client that started it.
            task = asyncio.ensure_future(self._verify(key, digest, subject))
            self._inflight[digest] = task
            task.add_done_callback(lambda done: self._verification_done(digest, done))
        # shield: one caller giving up (client disconnect) must not cancel the others' check.
        return await asyncio.shield(task)

    def _verification_done(self, digest: bytes, task: asyncio.Task[Principal]) -> None:
        self._inflight.pop(digest, None)
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone away

    async def _verify(self, key: ParsedKey, digest: bytes, subject: str) -> Principal:
        epoch = self._epoch
        stored = await self._store.get(key.key_id)
        if stored is None:
            log.info("api key rejected: unknown id")
            raise AuthenticationError
        record = stored.record
        if record.revoked_at is not None:
            log.info("api key %s rejected: revoked", key.key_id)
            raise AuthenticationError
        if record.is_expired(datetime.now(UTC)):
            log.info("api key %s rejected: expired", key.key_id)
            raise AuthenticationError
        if not self._lockout.begin(subject, time.monotonic()):
            log.info("api key %s rejected: locked out after repeated failures", key.key_id)
            raise AuthenticationError
        current = previous = False
        previous_hash = stored.previous_secret_hash if record.in_overlap(datetime.now(UTC)) else None
        try:
            current = await self._hasher.verify(stored.secret_hash, key.secret)
            if previous_hash is not None:
                # Verified whatever the first answer was: the time taken must not say which matched.
                previous = await self._hasher.verify(previous_hash, key.secret)
        finally:
            self._lockout.finish(subject, current or previous, time.monotonic())
        if not current and not previous:
            log.info("api key %s rejected: wrong secret", key.key_id)
            raise AuthenticationError
        ends = [t for t in (record.expires_at, None if current else record.previous_secret_until) if t]
        expires = min(ends).timestamp() if ends else None
        principal = self._cache.remember(
            digest, _principal(record, previous=not current), key.key_id, expires, keep=epoch == self._epoch
        )
        if current and self._hasher.needs_rehash(stored.secret_hash):
            await self._upgrade_hash(key, stored.secret_hash)
        return principal

    async def _upgrade_hash(self, key: ParsedKey, old_hash: str) -> None:
        # Best effort: the key verified; a store hiccup here must not fail the request.
        try:
            await self._store.upgrade_hash(key.key_id, old_hash, await self._hasher.hash(key.secret))
        except StorageUnavailableError:
            log.warning("api key %s: could not store a rehashed secret", key.key_id)

    def _forget(self, key_id: str) -> None:
        """Drop cached verifications of a key after its row changed.

        Called right after the write, with no await in between: a verification still running
        read the row before the write and finishes after this; the epoch bump keeps it from
        caching its stale result, and what it cached earlier is evicted here.
        """
        self._epoch += 1
        self._cache.evict_key(key_id)

    # -- change feed (revocations and rotations made by other processes) -----------------------
    async def start_change_feed(self) -> None:
        """Read the retained feed (the token cut-offs of every key changed within it), then
        follow it. Raises StorageUnavailableError."""
        self._feed_cursor = 0
        self._feed_read_at = None
        await self.poll_changes()
        self._feed_task = asyncio.create_task(self._follow_changes())

    async def poll_changes(self) -> int:
        """Read the feed once and forget the cached verifications of every changed key.

        Returns the number of entries applied. Raises StorageUnavailableError."""
        applied = 0
        while True:
            batch = await self._store.changes_after(self._feed_cursor, _FEED_BATCH)
            for change in batch:
                self._forget(change.key_id)
                self._note_cutoff(change.key_id, Cutoff.of(change.generation, change.previous_until))
                self._feed_cursor = change.id
            applied += len(batch)
            if len(batch) < _FEED_BATCH:
                break
        now = time.monotonic()
        if self._feed_stale(now):
            # After a gap the feed may have been pruned past entries we never read.
            self._epoch += 1
            self._cache.clear()
        self._feed_read_at = now
        return applied

    def _feed_stale(self, now: float) -> bool:
        if self._feed_read_at is None:  # no feed (a CLI, a single process): the TTL alone bounds it
            return False
        return now - self._feed_read_at > _STALE_POLLS * self._settings.change_poll_seconds

    async def _follow_changes(self) -> None:
        while not self._feed_stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._feed_stop.wait(), self._settings.change_poll_seconds)
                return
            try:
                await self.poll_changes()
            except StorageUnavailableError:
                log.warning("api key change feed unreadable; cached verifications distrusted until it is")

    async def aclose(self) -> None:
        """Stop following the change feed (after the poll in progress: cancelling it mid-query
        would leave the store's connection pool to clean up a half-used connection)."""
        if self._feed_task is not None:
            self._feed_stop.set()
            try:
                await asyncio.wait_for(self._feed_task, _FEED_STOP_SECONDS)
            except TimeoutError:
                log.warning("api key change feed did not stop in time")
            self._feed_task = None

    # -- management ---------------------------------------------------------------------------
    async def create_key(
        self,
        principal: str,
        kind: PrincipalKind,
        groups: Iterable[str] = (),
        expires_at: datetime | None = None,
        description: str = "",
    ) -> tuple[ApiKeyRecord, str]:
        """Create a key; returns its record and the plaintext key, which is never shown again.

        Raises InvalidApiKeyRequestError (bad name, kind, group, description, or an expiry that
        is naive or in the past), StorageUnavailableError.
        """
        now = datetime.now(UTC)
        principal = _clean_name(principal, "principal")
        if kind not in (PrincipalKind.USER, PrincipalKind.SERVICE):
            raise InvalidApiKeyRequestError("kind must be user or service")
        if isinstance(groups, str):
            raise InvalidApiKeyRequestError("groups must be a list of names, not one string")
        group_set = sorted({_clean_name(g, "group") for g in groups})
        if len(group_set) > MAX_GROUPS:
            raise InvalidApiKeyRequestError(f"at most {MAX_GROUPS} groups")
        if expires_at is not None:
            if expires_at.tzinfo is None:
                raise InvalidApiKeyRequestError("expires_at must carry a time zone")
            expires_at = expires_at.astimezone(UTC)
            if expires_at <= now:
                raise InvalidApiKeyRequestError("expires_at must be in the future")
        if len(description) > MAX_DESCRIPTION_LENGTH:
            raise InvalidApiKeyRequestError(f"description must be at most {MAX_DESCRIPTION_LENGTH} chars")
        for _attempt in range(3):
            key = generate_key()
            record = ApiKeyRecord(
                key_id=key.key_id,
                principal=principal,
                kind=kind,
                groups=tuple(group_set),
                created_at=now,
                expires_at=expires_at,
                revoked_at=None,
                rotated_at=None,
                description=description,
            )
            secret_hash = await self._hasher.hash(key.secret)
            try:
                await self._store.insert(record, secret_hash)
            except KeyIdTakenError:
                continue
            log.info("api key %s created for %s", key.key_id, principal)
            return record, key.presented
        raise RuntimeError("could not allocate an unused key id")  # 80 random bits: unreachable

    async def list_keys(
        self, *, principal: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[ApiKeyRecord]:
        """Records ordered by id (never secrets or hashes) after the id `after`; `limit` is capped at 1000."""
        return await self._store.list_records(
            principal=principal, after=after, limit=max(1, min(limit, MAX_LIST_LIMIT))
        )

    async def get_key(self, key_id: str) -> ApiKeyRecord:
        """Raises NoSuchApiKeyError."""
        stored = await self._store.get(key_id)
        if stored is None:
            raise NoSuchApiKeyError(key_id)
        return stored.record

    async def rotate_key(self, key_id: str, overlap_seconds: float = 0) -> tuple[ApiKeyRecord, str]:
        """Give a key a new secret, keeping its id, principal, groups and expiry.

        Returns the updated record and the new plaintext key. The old secret stops working at once,
        or, with `overlap_seconds` > 0, when that many seconds have passed (it replaces any
        previous secret still in an overlap, which stops at once).
        Raises NoSuchApiKeyError, ApiKeyRevokedError, InvalidApiKeyRequestError (an overlap below
        0 or above `max_rotation_overlap_seconds`).
        """
        bound = self._settings.max_rotation_overlap_seconds
        if not 0 <= overlap_seconds <= bound:
            raise InvalidApiKeyRequestError(
                f"overlap_seconds must be from 0 to {bound} (api_keys.max_rotation_overlap_seconds)"
            )
        stored = await self._store.get(key_id)
        if stored is None:
            raise NoSuchApiKeyError(key_id)
        if stored.record.revoked_at is not None:
            raise ApiKeyRevokedError(key_id)
        key = ParsedKey(key_id, generate_key().secret)
        secret_hash = await self._hasher.hash(key.secret)
        now = datetime.now(UTC)
        until = now + timedelta(seconds=overlap_seconds) if overlap_seconds > 0 else None
        generation = await self._store.replace_secret(key_id, secret_hash, now, until)
        self._forget(key_id)
        if generation is None:
            raise ApiKeyRevokedError(key_id)
        self._note_cutoff(key_id, Cutoff.of(generation, until))
        if until is None:
            log.info("api key %s rotated", key_id)
        else:
            log.info("api key %s rotated; its previous secret works until %s", key_id, until.isoformat())
        return await self.get_key(key_id), key.presented

    async def revoke_key(self, key_id: str) -> ApiKeyRecord:
        """Revoke a key (idempotent) and forget its cached verifications. Raises NoSuchApiKeyError."""
        generation = await self._store.revoke(key_id, datetime.now(UTC))
        self._forget(key_id)
        if generation is not None:
            self._note_cutoff(key_id, Cutoff(generation))
        record = await self.get_key(key_id)
        if generation is not None:
            log.info("api key %s revoked", key_id)
        return record
