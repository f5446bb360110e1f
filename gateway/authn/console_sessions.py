"""Console sessions and sign-ins in progress, kept in the registry's database.

Public API::

    sessions = ConsoleSessions(key_store, settings.console)
    secret = await sessions.start(principal)          # a new session; raises SessionStoreFullError
    principal = await sessions.principal(secret)      # None: unknown, ended, idle or too old
    await sessions.end(secret)                        # sign-out: gone for every process at once
    state = await sessions.begin_signin(data)         # an OIDC sign-in's `state`, kept a while
    data = await sessions.finish_signin(state)        # once only; None if unknown or too old

Why the registry (and not a process's memory or a self-contained signed cookie): with several
workers or instances the next request of a browser may reach any of them, and a sign-out, an idle
timeout or the revocation of the key a session was opened with must end the session everywhere at
once. A signed cookie would still need a shared list of ended sessions to do that; a row per
session is that list, and holds the principal too. A page costs one indexed read, plus a write at
most every `_TOUCH_EVERY` of the idle timeout (the last-seen time).

Invariants:
- The browser's secret (the session cookie; a sign-in's `state`) has 256 random bits and is
  never stored: rows are keyed by its SHA-256, so reading the table opens no session.
- A session ends at `absolute_timeout_seconds` after sign-in or `idle_timeout_seconds` after its
  last use, whichever comes first; an ended row is never answered, and is removed when seen.
- The store is bounded: at most `max_sessions` sessions (expired ones are removed to make room;
  if all are live a new one is refused) and `max_pending_signins` sign-ins in progress (the oldest
  is dropped: anyone may start one, so none of them may block a sign-in).
- Database failures are `StorageUnavailableError` (503), as for API keys.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Float,
    Index,
    Integer,
    String,
    Table,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)

from cedarberg.catalog.store.statements import Sql, values_of
from cedarberg.gateway.authn.key_store import KeyStore, metadata
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.stored_values import json_value
from cedarberg.gateway.config.console import ConsoleSettings

ACTIVE = "active"
PENDING = "pending"
SECRET_BYTES = 32  # 256 bits
# The last-seen time is written when it is older than this share of the idle timeout: the idle
# timeout is then kept to within that share, for one write per so many pages.
_TOUCH_EVERY = 0.1

console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("state", String(8), nullable=False),
    Column("document", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("last_seen_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_console_sessions_state_expires", "state", "expires_at"),
)


_s = console_sessions.c
_now = bindparam("now", type_=Float)
_key = _s.id_hash == bindparam("key")
# Live: active, within its absolute lifetime, used within the idle timeout (`idle_since`).
_live = (
    (_s.state == ACTIVE) & (_s.expires_at > _now) & (_s.last_seen_at > bindparam("idle_since", type_=Float))
)
_COUNT_LIVE = Sql(select(func.count()).select_from(console_sessions).where(_live))
_DELETE_ENDED = Sql(delete(console_sessions).where((_s.state == ACTIVE) & ~_live))
_INSERT = Sql(
    insert(console_sessions).values(
        values_of(
            console_sessions, "id_hash", "state", "document", "created_at", "last_seen_at", "expires_at"
        )
    )
)
_FIND = Sql(select(console_sessions).where(_key, _s.state == ACTIVE))
_TOUCH = Sql(update(console_sessions).where(_key).values(last_seen_at=_now))
_DELETE = Sql(delete(console_sessions).where(_key))
_pending = _s.state == PENDING
_DELETE_EXPIRED_SIGNINS = Sql(delete(console_sessions).where(_pending & (_s.expires_at <= _now)))
_COUNT_SIGNINS = Sql(select(func.count()).select_from(console_sessions).where(_pending))
_DROP_OLDEST_SIGNINS = Sql(
    delete(console_sessions).where(
        _s.id_hash.in_(
            select(_s.id_hash)
            .where(_pending)
            .order_by(_s.created_at)
            .limit(bindparam("excess", type_=Integer))
            .scalar_subquery()
        )
    )
)
_FIND_SIGNIN = Sql(select(_s.document, _s.expires_at).where(_key, _pending))


class SessionStoreFullError(Exception):
    """`max_sessions` live sessions exist: no new one until one ends."""


def new_secret() -> str:
    """A browser-held secret: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(SECRET_BYTES)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def principal_document(principal: Principal) -> dict[str, Any]:
    """What a session keeps of its principal: everything policies and the key cut-off read."""
    return {
        "id": principal.id,
        "kind": principal.kind.value,
        "groups": sorted(principal.groups),
        "auth_method": principal.auth_method.value,
        "attributes": dict(principal.attributes),
        "key_generation": principal.key_generation,
        "key_secret_until": principal.key_secret_until,
    }


def principal_of(document: dict[str, Any]) -> Principal:
    """The principal `principal_document` kept. Raises KeyError/ValueError for a foreign row."""
    return Principal(
        id=str(document["id"]),
        kind=PrincipalKind(document["kind"]),
        groups=frozenset(str(group) for group in document["groups"]),
        auth_method=AuthMethod(document["auth_method"]),
        attributes={str(k): str(v) for k, v in dict(document["attributes"]).items()},
        key_generation=document.get("key_generation"),
        key_secret_until=document.get("key_secret_until"),
    )


@dataclass(frozen=True, slots=True)
class Session:
    """A live session: its principal and when it was opened (epoch seconds)."""

    principal: Principal
    created_at: float


class ConsoleSessions:
    """Reads and writes `console_sessions` on the key store's driver."""

    def __init__(self, store: KeyStore, settings: ConsoleSettings) -> None:
        self._store = store
        self._settings = settings

    # -- sessions ---------------------------------------------------------------------------------

    async def start(self, principal: Principal) -> str:
        """Open a session for `principal`; returns the secret for the browser's cookie.
        Raises SessionStoreFullError, StorageUnavailableError."""
        secret, now = new_secret(), time.time()
        settings = self._settings
        window = {"now": now, "idle_since": now - settings.idle_timeout_seconds}
        async with self._store.writing() as conn:
            count = (await conn.execute(_COUNT_LIVE, window)).scalar_one()
            if count >= settings.max_sessions:
                raise SessionStoreFullError
            await conn.execute(_DELETE_ENDED, window)
            await conn.execute(
                _INSERT,
                {
                    "id_hash": _digest(secret),
                    "state": ACTIVE,
                    "document": principal_document(principal),
                    "created_at": now,
                    "last_seen_at": now,
                    "expires_at": now + settings.absolute_timeout_seconds,
                },
            )
        return secret

    async def find(self, secret: str) -> Session | None:
        """The live session `secret` opens, its last use noted; None if there is none (unknown,
        ended, idle past the timeout or past its absolute lifetime). Raises StorageUnavailableError."""
        key, now = _digest(secret), time.time()
        async with self._store.reading() as conn:
            row = (await conn.execute(_FIND, {"key": key})).first()
        if row is None:
            return None
        idle = self._settings.idle_timeout_seconds
        if now >= row.expires_at or now - row.last_seen_at >= idle:
            await self._remove(key)
            return None
        try:
            principal = principal_of(json_value(row.document))
        except (KeyError, ValueError, TypeError):
            await self._remove(key)
            return None
        if now - row.last_seen_at >= idle * _TOUCH_EVERY:
            async with self._store.writing() as conn:
                await conn.execute(_TOUCH, {"key": key, "now": now})
        return Session(principal, float(row.created_at))

    async def end(self, secret: str) -> bool:
        """End the session `secret` opens (sign-out); False if there was none."""
        return await self._remove(_digest(secret))

    async def _remove(self, key: str) -> bool:
        async with self._store.writing() as conn:
            done = await conn.execute(_DELETE, {"key": key})
        return bool(done.rowcount)

    # -- sign-ins at the issuer -------------------------------------------------------------------

    async def begin_signin(self, data: dict[str, Any]) -> str:
        """Keep `data` (the nonce, the PKCE verifier, the browser binding) for a sign-in started
        now; returns its `state`. The oldest sign-ins in progress make room past the bound."""
        state, now = new_secret(), time.time()
        settings = self._settings
        async with self._store.writing() as conn:
            await conn.execute(_DELETE_EXPIRED_SIGNINS, {"now": now})
            count = (await conn.execute(_COUNT_SIGNINS)).scalar_one()
            excess = count - settings.max_pending_signins + 1
            if excess > 0:
                await conn.execute(_DROP_OLDEST_SIGNINS, {"excess": excess})
            await conn.execute(
                _INSERT,
                {
                    "id_hash": _digest(state),
                    "state": PENDING,
                    "document": data,
                    "created_at": now,
                    "last_seen_at": now,
                    "expires_at": now + settings.signin_timeout_seconds,
                },
            )
        return state

    async def finish_signin(self, state: str) -> dict[str, Any] | None:
        """The data `begin_signin` kept for `state`, removed so that it serves once; None if it
        is unknown, used already or past `signin_timeout_seconds`."""
        key = _digest(state)
        async with self._store.writing() as conn:
            row = (await conn.execute(_FIND_SIGNIN, {"key": key})).first()
            if row is None:
                return None
            await conn.execute(_DELETE, {"key": key})
        document = json_value(row.document)
        if time.time() >= row.expires_at or not isinstance(document, dict):
            return None
        return dict(document)
