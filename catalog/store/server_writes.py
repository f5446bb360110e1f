"""The registry's common writes as one statement each, on stores where `Store.writes_alone`
(PostgreSQL): a table or view commit, a create, a namespace creation. On a SQLite registry whose
writes go to a writer process (also `writes_alone`) the commit and the namespace creation are one
message each instead, to the writer's procedures of the same name (catalog.store.writer_calls).

Each calls a server-side function (migrations 0013, 0014) that reads, checks and writes inside
the one statement, run in autocommit: one round trip, one transaction, prepared once per connection (the
statement text is fixed). The caller keeps its general transaction (catalog.commits,
catalog.namespaces) for everything else: an `Outcome.GENERAL` answer, or a constraint violation,
means nothing was written and the general transaction decides (and words the refusal) exactly as
it always did. The compare-and-swap is the same condition as `catalog.store.objects.swap_object`: the pointer
still names the metadata file and the data key read.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import ARRAY, BigInteger, Boolean, Float, Integer, LargeBinary, Text, column, text
from sqlalchemy import bindparam as param

from cedarberg.catalog.roots import ancestors
from cedarberg.catalog.store.cache import Touched
from cedarberg.catalog.store.driver import IntegrityViolation
from cedarberg.catalog.store.idempotency import IdempotencyRecord
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.roots import PG_ROOTS_LOCK, namespace_owner, place_locks
from cedarberg.catalog.store.statements import Sql


class Outcome(enum.IntEnum):
    """What a server-side write answered (the functions' return codes)."""

    DONE = 0  # written, with the idempotency record if one was given
    LOST_RACE = 1  # the pointer moved, or the name was taken, since it was read: nothing written
    GENERAL = 2  # not the common case: nothing written, run the general transaction


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """An idempotency record to write with the change (the arguments of
    `catalog.store.idempotency.put_idempotency`)."""

    key: str
    record: IdempotencyRecord
    expired_before: float


_BYTES = LargeBinary()
_BYTES_LIST = ARRAY(LargeBinary)
_TYPES: dict[str, Any] = {
    "now": BigInteger(),
    "version": Integer(),
    "lock": BigInteger(),
    "places": ARRAY(Integer),
    "exclusive": ARRAY(Boolean),
    "check_uuid": Boolean(),
    "new_metadata": _BYTES,
    "metadata": _BYTES,
    "wrapped_key": _BYTES,
    "expected_key": _BYTES,
    "directory": _BYTES,
    "payload": _BYTES,
    "roots": _BYTES_LIST,
    "above": _BYTES_LIST,
    "below": _BYTES_LIST,
    "ancestors": _BYTES_LIST,
    "created_at": Float(),
    "expired_before": Float(),
}
_RECORD_ARGS = ("key", "operation", "request_hash", "outcome", "payload", "created_at", "expired_before")


def _call(function: str, *names: str) -> Sql:
    """`SELECT function(:name, ...) AS outcome`: one fixed text, so one prepared statement."""
    arguments = ", ".join(f":{name}" for name in (*names, *_RECORD_ARGS))
    clause = text(f"SELECT {function}({arguments}) AS outcome").bindparams(
        *[param(name, type_=_TYPES.get(name, Text())) for name in (*names, *_RECORD_ARGS)]
    )
    return Sql(clause.columns(column("outcome", Integer)))


_SWAP = _call(
    "cedarberg_swap_version",
    *("warehouse", "namespace", "name", "kind", "owner", "roots"),
    *("expected", "expected_key", "new_location", "new_metadata", "now"),
)
_CREATE = _call(
    "cedarberg_create_object",
    *("warehouse", "namespace", "name", "kind", "uuid", "metadata_location", "metadata", "version"),
    *("kek_uri", "kek_version", "wrapped_key", "now", "check_uuid", "ns_properties", "lock", "places"),
    "exclusive",
    *("roots", "above", "below", "ancestors"),
)
_CREATE_NAMESPACE = _call(
    "cedarberg_create_namespace",
    *("warehouse", "name", "parent", "properties", "now", "directory", "ancestors", "owner", "lock"),
    *("places", "exclusive"),
)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _record_params(pending: PendingRecord | None) -> dict[str, Any]:
    if pending is None:
        return dict.fromkeys(_RECORD_ARGS)
    record = pending.record
    return {
        "key": pending.key,
        "operation": record.operation,
        "request_hash": record.request_hash,
        "outcome": record.outcome,
        "payload": record.payload,
        "created_at": record.created_at,
        "expired_before": pending.expired_before,
    }


def _place_params(roots: Sequence[str]) -> dict[str, Any]:
    places, exclusive = place_locks(roots)
    return {"places": places, "exclusive": exclusive}


async def _run(store: Store, sql: Sql, params: dict[str, Any], touched: Touched) -> Outcome:
    try:
        return Outcome(await store.write_alone(sql, params, touched))
    except IntegrityViolation:
        # A name, UUID or idempotency key taken concurrently, a parent gone: the statement's
        # transaction rolled back whole, and the general path words the refusal.
        return Outcome.GENERAL


@dataclass(frozen=True, slots=True)
class NewVersion:
    """A pointer's next version: its metadata file, the sealed copy the registry keeps, and every
    root the object has after it."""

    metadata_location: str
    metadata: bytes
    roots: Sequence[str]


@dataclass(frozen=True, slots=True)
class Placement:
    """The roots a new object claims, the namespace properties they were placed against, and
    whether its UUID must be one no live or dropped object has."""

    roots: Sequence[str]
    ns_properties: dict[str, str]
    check_uuid: bool = False


@dataclass(frozen=True, slots=True)
class NewNamespace:
    """A namespace to create (keys as `catalog.store.namespaces.insert_namespace` takes them) and
    its directory."""

    warehouse: str
    name: str
    parent: str | None
    properties: dict[str, str]
    directory: str


def creates_alone(store: Store) -> bool:
    """Whether `insert_object` may land a create in one statement (PostgreSQL only: a SQLite
    writer process runs creates as general transactions)."""
    return store.writes_alone and store.dialect == "postgresql"


async def swap_object(
    store: Store, base: ObjectRow, new: NewVersion, pending: PendingRecord | None
) -> Outcome:
    """Compare-and-swap the pointer `base` was read from to `new` (if it still names `base`'s
    metadata file and data key: else LOST_RACE), if the object holds every root
    of `new.roots` already (else GENERAL: roots to claim). Raises StorageUnavailableError,
    CommitStateUnknownError."""
    args = {
        "warehouse": base.warehouse,
        "namespace": base.namespace,
        "name": base.name,
        "kind": base.kind,
        "owner": base.uuid,
        "expected": base.metadata_location,
        "expected_key": base.wrapped_key,
        "new_location": new.metadata_location,
        "new_metadata": new.metadata,
        **_record_params(pending),
    }
    touched = Touched(objects={(base.warehouse, base.namespace, base.name)})
    if store.dialect == "sqlite":
        return Outcome(await store.call_writer("swap_version", {**args, "roots": list(new.roots)}, touched))
    params = {**args, "roots": [root.encode() for root in new.roots], "now": _now_ms()}
    return await _run(store, _SWAP, params, touched)


async def insert_object(
    store: Store, row: ObjectRow, placement: Placement, pending: PendingRecord | None
) -> Outcome:
    """Insert a new pointer and claim its roots (placed by the caller against
    `placement.ns_properties`), if its namespace still has those properties, nothing recorded
    overlaps the roots and (with `placement.check_uuid`) no live or dropped object has its UUID;
    LOST_RACE if the name was taken since it was planned; GENERAL where not `creates_alone`.
    Raises StorageUnavailableError, CommitStateUnknownError."""
    if not creates_alone(store):
        return Outcome.GENERAL
    fresh = sorted(set(placement.roots))
    strict_ancestors = sorted({item for root in fresh for item in ancestors(root)} - set(fresh))
    params = {
        "warehouse": row.warehouse,
        "namespace": row.namespace,
        "name": row.name,
        "kind": row.kind,
        "uuid": row.uuid,
        "metadata_location": row.metadata_location,
        "metadata": row.metadata,
        "version": row.version,
        "kek_uri": row.kek_uri,
        "kek_version": row.kek_version,
        "wrapped_key": row.wrapped_key,
        "now": _now_ms(),
        "check_uuid": placement.check_uuid,
        "ns_properties": orjson.dumps(placement.ns_properties).decode(),
        "lock": PG_ROOTS_LOCK,
        **_place_params(fresh),
        "roots": [root.encode() for root in fresh],
        # Below a root: between `root/` and `root0` ('0' follows '/'), as catalog.store.roots.near.
        "above": [(root.rstrip("/") + "/").encode() for root in fresh],
        "below": [(root.rstrip("/") + "0").encode() for root in fresh],
        "ancestors": [item.encode() for item in strict_ancestors],
        **_record_params(pending),
    }
    touched = Touched(objects={(row.warehouse, row.namespace, row.name)})
    return await _run(store, _CREATE, params, touched)


async def insert_namespace(store: Store, new: NewNamespace, pending: PendingRecord | None) -> Outcome:
    """Insert a namespace and record its directory, if the directory lies inside no table's or
    view's roots. Raises StorageUnavailableError, CommitStateUnknownError."""
    args = {
        "warehouse": new.warehouse,
        "name": new.name,
        "parent": new.parent,
        "properties": orjson.dumps(new.properties).decode(),
        **_record_params(pending),
    }
    touched = Touched(namespaces={(new.warehouse, new.name)})
    if store.dialect == "sqlite":
        args = {**args, "directory": new.directory}
        return Outcome(await store.call_writer("create_namespace", args, touched))
    params = {
        **args,
        "now": _now_ms(),
        "directory": new.directory.encode(),
        "ancestors": [item.encode() for item in ancestors(new.directory)],
        "owner": namespace_owner(new.warehouse, new.name),
        "lock": PG_ROOTS_LOCK,
        **_place_params([new.directory]),
    }
    return await _run(store, _CREATE_NAMESPACE, params, touched)
