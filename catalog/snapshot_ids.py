"""A snapshot id names one snapshot: a commit never gives a used id to a new snapshot.

Refs, requirements (`assert-ref-snapshot-id`), statistics and engines name snapshots by id. If a
commit could remove snapshot S and add another snapshot under the id S, every one of those would
silently name the new snapshot: `remove-snapshots [S]`, `add-snapshot S` with another manifest
list and `set-snapshot-ref main -> S` leave the ref tuples and the set of ids as they were while
`main` reads other data. Iceberg's reference (`TableMetadata.Builder.addSnapshot`) refuses an id
present in the metadata it builds on; here the rule holds for the whole commit: an `add-snapshot`
is refused when its id is in the table as it was stored before the commit, or was added earlier in
the same commit, whatever was removed in between, and across every change list that reaches the
table in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AddSnapshotUpdate, TableUpdate

from cedarberg.catalog.errors import MetadataValidationError


def added_ids(
    origin: TableMetadata | None, added_before: frozenset[int], updates: Sequence[TableUpdate]
) -> frozenset[int]:
    """The ids of the snapshots the commit has added once `updates` are applied: `added_before`
    (earlier change lists to the same table in this commit) and those `updates` add.

    `origin` is the table as stored before the commit (None: the commit creates it).
    Raises MetadataValidationError, worded as the reference words it, for an `add-snapshot` whose
    id `origin` holds or the commit has added already.
    """
    adding = [update.snapshot.snapshot_id for update in updates if isinstance(update, AddSnapshotUpdate)]
    if not adding:
        # Most commits add one snapshot or none: the origin's ids are collected only when needed.
        return added_before
    used = set(added_before)
    if origin is not None:
        used.update(snapshot.snapshot_id for snapshot in origin.snapshots)
    added = set(added_before)
    for snapshot_id in adding:
        if snapshot_id in used:
            raise MetadataValidationError(f"Snapshot already exists for id: {snapshot_id}")
        used.add(snapshot_id)
        added.add(snapshot_id)
    return frozenset(added)
