"""The registry's common writes as one message to the SQLite registry's writer process
(catalog.store.sqlite_writer), for a gateway whose workers hand it their writes: a commit's swap
and a namespace creation, each run whole in the writer as a member of its group commit, so a
worker pays one round trip for the transaction instead of one per statement plus "begin" and
"commit".

They are the SQLite side of PostgreSQL's server-side functions (catalog.store.server_writes, which
calls them): the same arguments, the same answers (`Outcome`), made of the statements the general
transactions use. An answer other than DONE means the writer rolled the member back and nothing
was written; the worker then runs its general transaction, which decides and words the refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from cedarberg.catalog.errors import AlreadyExistsError, NoSuchNamespaceError
from cedarberg.catalog.store import idempotency as idempotency_rows
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as root_rows
from cedarberg.catalog.store.idempotency import IdempotencyRecord
from cedarberg.catalog.store.server_writes import Outcome
from cedarberg.catalog.store.tx import StoreTx

Arguments = Mapping[str, Any]  # a call's arguments: JSON values and bytes (catalog.store.writer_wire)
Procedure = Callable[[StoreTx, Arguments], Awaitable[Outcome]]


async def _record(tx: StoreTx, args: Arguments) -> None:
    """The idempotency record the call carries, if any (a key taken: DuplicateKeyError, and the
    writer rolls the member back)."""
    if args["key"] is None:
        return
    record = IdempotencyRecord(
        args["operation"], args["request_hash"], args["outcome"], args["payload"], args["created_at"]
    )
    await idempotency_rows.put_idempotency(tx, args["key"], record, args["expired_before"])


async def swap_version(tx: StoreTx, args: Arguments) -> Outcome:
    """PostgreSQL's `cedarberg_swap_version`: GENERAL if the object does not hold every root of
    `roots` yet (they are claimed by the general path), LOST_RACE if the pointer no longer names
    the version read, else the pointer moves (and the record is written): DONE."""
    held = set(await root_rows.held(tx, args["kind"], args["owner"]))
    if not held.issuperset(args["roots"]):
        return Outcome.GENERAL
    expected = object_rows.Version(
        args["warehouse"], args["namespace"], args["name"], args["expected"], args["expected_key"]
    )
    if not await object_rows.swap_version(tx, expected, args["new_location"], args["new_metadata"]):
        return Outcome.LOST_RACE
    await _record(tx, args)
    return Outcome.DONE


async def create_namespace(tx: StoreTx, args: Arguments) -> Outcome:
    """PostgreSQL's `cedarberg_create_namespace`: the namespace and its directory (and the record),
    DONE; GENERAL if the name is taken, the parent is missing or the directory lies inside a
    table's or view's roots (the general transaction words each)."""
    warehouse = args["warehouse"]
    try:
        properties = orjson.loads(args["properties"])  # JSON text: a mapping on the wire is bytes
        await namespace_rows.insert_namespace(tx, warehouse, args["name"], args["parent"], properties)
    except (AlreadyExistsError, NoSuchNamespaceError):
        return Outcome.GENERAL
    owner = root_rows.namespace_owner(warehouse, args["name"])
    if not await root_rows.claim_namespace_directory(tx, warehouse, owner, args["directory"]):
        return Outcome.GENERAL
    await _record(tx, args)
    return Outcome.DONE


PROCEDURES: dict[str, Procedure] = {"swap_version": swap_version, "create_namespace": create_namespace}
