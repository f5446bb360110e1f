"""The user directory: who engines may act for, and in which groups (delegation).

Public API::

    directory = UserDirectory(key_store)
    record = await directory.put(name, groups)       # create or replace; raises InvalidDirectoryRequestError
    record = await directory.get(name)               # None if the user is not listed
    records = await directory.list(after=None, limit=100)
    removed = await directory.delete(name)           # False if it was not listed

An unsigned subject token names a user and nothing else: the name alone carries no groups. The
directory is the operator's word on who that user is: a user it does not list is refused at the
token endpoint, and a listed user's groups are exactly the directory's (bare names, like the
groups of API keys: both are set by admins). It lives in the registry's database beside the API
keys (table `directory_users`, gateway migration gw0004), so every gateway process reads the
same directory; it is read once per exchange and once per refresh, never on a catalog request,
so a removal or a group change takes effect at the user's next token (at most
`tokens.ttl_seconds` later).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Integer,
    String,
    Table,
    bindparam,
    delete,
    insert,
    select,
    update,
)

from cedarberg.catalog.store.driver import IntegrityViolation
from cedarberg.catalog.store.statements import Sql
from cedarberg.gateway.authn.key_store import KeyStore, metadata
from cedarberg.gateway.authn.stored_values import json_value, utc
from cedarberg.gateway.authn.subject_token import MAX_NAME_LENGTH, valid_user_name

MAX_GROUPS = 64
MAX_GROUP_LENGTH = 256

directory_users = Table(
    "directory_users",
    metadata,
    Column("name", String(MAX_NAME_LENGTH), primary_key=True),
    Column("groups", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


class InvalidDirectoryRequestError(ValueError):
    """A user name or group list the directory does not accept (the message says why)."""


@dataclass(frozen=True, slots=True)
class DirectoryUser:
    """One listed user: its name (the Trino user name) and its groups."""

    name: str
    groups: tuple[str, ...]
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "groups": list(self.groups),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def _record(row: Any) -> DirectoryUser:
    created_at, updated_at = utc(row.created_at), utc(row.updated_at)
    assert created_at is not None  # NOT NULL columns
    assert updated_at is not None
    return DirectoryUser(row.name, tuple(json_value(row.groups)), created_at, updated_at)


_user = directory_users.c
_at = bindparam("at", type_=_user.updated_at.type)
_UPDATE_USER = Sql(
    update(directory_users)
    .where(_user.name == bindparam("name"))
    .values(groups=bindparam("groups", type_=_user.groups.type), updated_at=_at)
)
_INSERT_USER = Sql(
    insert(directory_users).values(
        name=bindparam("name", type_=_user.name.type),
        groups=bindparam("groups", type_=_user.groups.type),
        created_at=_at,
        updated_at=_at,
    )
)
_GET_USER = Sql(select(directory_users).where(_user.name == bindparam("name")))
_DELETE_USER = Sql(delete(directory_users).where(_user.name == bindparam("name")))


@lru_cache(maxsize=2)
def _list_users(after: bool) -> Sql:
    query = select(directory_users).order_by(_user.name).limit(bindparam("limit", type_=Integer))
    if after:
        query = query.where(_user.name > bindparam("after"))
    return Sql(query)


def clean_groups(groups: list[str]) -> tuple[str, ...]:
    """The groups, sorted and deduplicated. Raises InvalidDirectoryRequestError."""
    if len(groups) > MAX_GROUPS:
        raise InvalidDirectoryRequestError(f"a user has at most {MAX_GROUPS} groups")
    for group in groups:
        # The same rule as user names: a `/` would spell an OIDC issuer's scoped group.
        if not valid_user_name(group) or len(group) > MAX_GROUP_LENGTH:
            raise InvalidDirectoryRequestError(
                "group names must be 1-256 characters, not padded, without control characters or '/'"
            )
    return tuple(sorted(set(groups)))


class UserDirectory:
    """Reads and writes `directory_users` on the key store's driver."""

    def __init__(self, store: KeyStore) -> None:
        self._store = store

    async def put(self, name: str, groups: list[str]) -> DirectoryUser:
        """List `name` with exactly `groups` (creating or replacing it).

        Raises InvalidDirectoryRequestError, StorageUnavailableError."""
        if not valid_user_name(name):
            raise InvalidDirectoryRequestError(
                "user names must be 1-256 characters, not padded, without control characters or '/'"
            )
        members = clean_groups(groups)
        try:
            return await self._upsert(name, members)
        except IntegrityViolation:
            # Another writer listed the same name between our update and insert: it exists now,
            # so the second attempt replaces it.
            return await self._upsert(name, members)

    async def _upsert(self, name: str, members: tuple[str, ...]) -> DirectoryUser:
        params = {"name": name, "groups": list(members), "at": datetime.now(UTC)}
        async with self._store.writing() as conn:
            changed = await conn.execute(_UPDATE_USER, params)
            if changed.rowcount == 0:
                await conn.execute(_INSERT_USER, params)
            row = (await conn.execute(_GET_USER, params)).first()
        return _record(row)

    async def get(self, name: str) -> DirectoryUser | None:
        """The listed user `name`, or None. Raises StorageUnavailableError."""
        if not valid_user_name(name):
            return None
        async with self._store.reading() as conn:
            row = (await conn.execute(_GET_USER, {"name": name})).first()
        return None if row is None else _record(row)

    async def list(self, after: str | None = None, limit: int = 100) -> list[DirectoryUser]:
        """Up to `limit` users in name order, after `after`. Raises StorageUnavailableError."""
        async with self._store.reading() as conn:
            rows = await conn.execute(_list_users(after is not None), {"after": after, "limit": limit})
        return [_record(row) for row in rows]

    async def delete(self, name: str) -> bool:
        """Unlist `name`; False if it was not listed. Raises StorageUnavailableError."""
        async with self._store.writing() as conn:
            removed = await conn.execute(_DELETE_USER, {"name": name})
        return bool(removed.rowcount)
