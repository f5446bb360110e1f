"""The retry after a lost race: one exception and one loop for every compare-and-swap write.

Every write that changes or removes a table or view (commit, create, register, drop, unregister,
rename) reads the object's pointer, decides on what it read (plans, judges, opens its metadata),
then writes only if the pointer still names the version read. When it does not, the writer lost a
race: nothing was written, and the whole operation starts again from its read, so that it is
decided again on the newer version (re-planned, re-judged). After `attempts` lost races the
operation fails with CommitFailedError, which clients answer by reloading and retrying.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from cedarberg.catalog.errors import CommitFailedError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.tx import StoreTx

T = TypeVar("T")


class PointerMoved(Exception):
    """The pointer a write was decided on moved (or went) before the write: raised inside the
    write transaction it rolls that back; `retry_lost_races` starts the operation again."""


async def retry_lost_races(
    attempts: int, attempt: Callable[[], Awaitable[T]], gave_up: Callable[[], str]
) -> T:
    """What `attempt()` returns once it does not raise PointerMoved, called at most `attempts`
    times. `attempt` cleans up what it made before raising PointerMoved (files it wrote).

    Raises CommitFailedError (worded by `gave_up()`) after `attempts` lost races, and whatever
    `attempt` raises besides PointerMoved."""
    for _attempt in range(attempts):
        try:
            return await attempt()
        except PointerMoved:
            continue
    raise CommitFailedError(gave_up())


async def delete_unchanged(tx: StoreTx, warehouse: str, identifier: Identifier, judged: ObjectRow) -> None:
    """Delete the pointer of `identifier` in `tx` only if it still names the version `judged`
    (read before the transaction): a drop or unregister never removes a version it did not see.
    Raises PointerMoved (the pointer moved or went) so that the operation looks again."""
    deleted = await object_rows.delete_object(
        tx, warehouse, identifier.namespace.key, identifier.name, judged.kind, judged.metadata_location
    )
    if not deleted:
        raise PointerMoved
