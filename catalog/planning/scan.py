"""What a plan scans (resolved from the request on the event loop) and the planning itself
(pyiceberg's manifest planner, blocking: run it in a worker thread).

Point-in-time scans plan the manifests of one snapshot with pyiceberg's `ManifestGroupPlanner`;
incremental scans use pyiceberg's `IncrementalAppendScan` (the data files that append snapshots
after the start, exclusive, up to the end, inclusive, added on that lineage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyiceberg.expressions import BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, IncrementalAppendScan, ManifestGroupPlanner
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, is_parent_ancestor_of
from pyiceberg.types import IcebergType, ListType, MapType, StructType

from cedarberg.catalog.errors import (
    ForbiddenError,
    InvalidRequestError,
    StorageUnavailableError,
    UnprocessableError,
)
from cedarberg.catalog.planning.grants import (
    ScanGrant,
    effective_row_filter,
    full_name,
    referenced_fields,
    restrict,
)
from cedarberg.catalog.planning.request import PlanScanRequest
from cedarberg.catalog.planning.serialize import TaskEncoder


class PlanStopped(StorageUnavailableError):
    """The plan was cancelled (or its gateway is shutting down) while it ran."""


class TooManyFilesError(UnprocessableError):
    pass


@dataclass(frozen=True, slots=True)
class Scan:
    """A validated scan: the table as the planner sees it and what to plan."""

    metadata: TableMetadata  # its current schema is the scan schema
    snapshot: Snapshot | None  # point-in-time: the snapshot scanned (None: an empty table)
    incremental: tuple[int, int] | None  # (start exclusive, end inclusive)
    row_filter: BooleanExpression  # the request's filter AND the policy's
    case_sensitive: bool
    encoder: TaskEncoder

    def manifests(self, io: FileIO) -> list[ManifestFile]:
        """The manifests whose count is the size rule for answering at once: the scanned
        snapshot's (an incremental scan's end snapshot's). Reads the manifest list."""
        target = self.snapshot
        if self.incremental is not None:
            target = self.metadata.snapshot_by_id(self.incremental[1])
        return [] if target is None else target.manifests(io)


def prepare(metadata: TableMetadata, request: PlanScanRequest, grants: Sequence[ScanGrant]) -> Scan:
    """Resolve and check a request against a table's metadata and the caller's grants.

    Raises InvalidRequestError (unknown snapshot, column or a filter that does not bind),
    ForbiddenError (no grant covers the request)."""
    snapshot, incremental = _snapshots(metadata, request)
    target = snapshot if incremental is None else metadata.snapshot_by_id(incremental[1])
    if request.use_snapshot_schema and target is not None and target.schema_id is not None:
        if target.schema_id not in {schema.schema_id for schema in metadata.schemas}:
            raise InvalidRequestError(f"the schema of snapshot {target.snapshot_id} is missing")
        metadata = metadata.model_copy(update={"current_schema_id": target.schema_id})
    schema = metadata.schema()
    stats_names = {full_name(schema, name, request.case_sensitive) for name in request.stats_fields or ()}
    # Statistics reveal values (bounds), so the stats fields are referenced like selected columns.
    fields = referenced_fields(schema, request.select, request.row_filter, request.case_sensitive)
    fields |= stats_names
    policy_filter = _policy_filter(metadata, schema, grants, fields)
    stats_ids = frozenset(field_id for name in stats_names for field_id in _ids_within(schema, name))
    return Scan(
        metadata=metadata,
        snapshot=snapshot,
        incremental=incremental,
        row_filter=restrict(request.row_filter, policy_filter),
        case_sensitive=request.case_sensitive,
        encoder=TaskEncoder(schema, metadata.specs(), stats_ids),
    )


def _policy_filter(
    metadata: TableMetadata, schema: Schema, grants: Sequence[ScanGrant], fields: frozenset[str]
) -> BooleanExpression | None:
    """The row filter the grants impose on a scan touching `fields`. The columns the table is (or
    was) partitioned by count as touched: a task's partition tuple and its file's path carry
    their values. Raises ForbiddenError, naming the request's own columns when they are the cause."""
    partitioned_by = {
        name
        for spec in metadata.specs().values()
        for field in spec.fields
        if (name := schema.find_column_name(field.source_id)) is not None
    }
    try:
        return effective_row_filter(grants, schema, fields | partitioned_by)
    except ForbiddenError:
        effective_row_filter(grants, schema, fields)  # refuses the request's own columns first
        hidden = ", ".join(sorted(partitioned_by - fields))
        raise ForbiddenError(
            f"this table is partitioned by columns you may not scan ({hidden}): "
            "its tasks and file paths would reveal their values"
        ) from None


def _snapshots(
    metadata: TableMetadata, request: PlanScanRequest
) -> tuple[Snapshot | None, tuple[int, int] | None]:
    if request.start_snapshot_id is not None and request.end_snapshot_id is not None:
        start, end = request.start_snapshot_id, request.end_snapshot_id
        if metadata.snapshot_by_id(end) is None:
            raise InvalidRequestError(f"end-snapshot-id {end} is not a snapshot of this table")
        # The start may have expired; it must still be the parent of a snapshot on the end's lineage.
        if start != end and not is_parent_ancestor_of(end, start, metadata):
            raise InvalidRequestError(
                f"start-snapshot-id {start} is not an ancestor of end-snapshot-id {end}"
            )
        return None, (start, end)
    if request.ref is not None:
        ref = metadata.refs.get(request.ref)
        if ref is None:
            raise InvalidRequestError(f"ref {request.ref!r} is not a branch or tag of this table")
        return metadata.snapshot_by_id(ref.snapshot_id), None
    if request.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(request.snapshot_id)
        if snapshot is None:
            raise InvalidRequestError(f"snapshot-id {request.snapshot_id} is not a snapshot of this table")
        return snapshot, None
    return metadata.current_snapshot(), None


def _ids_within(schema: Schema, name: str) -> list[int]:
    """The field id of `name` and of every field nested in it."""
    field = schema.find_field(name)
    ids = [field.field_id]
    pending: list[IcebergType] = [field.field_type]
    while pending:
        current = pending.pop()
        if isinstance(current, StructType):
            children = list(current.fields)
        elif isinstance(current, ListType):
            children = [current.element_field]
        elif isinstance(current, MapType):
            children = [current.key_field, current.value_field]
        else:
            continue
        ids.extend(child.field_id for child in children)
        pending.extend(child.field_type for child in children)
    return ids


class Guard:
    """Stops a running plan when asked (cancel, shutdown) or when it grows beyond `max_files`."""

    def __init__(self, should_stop: Callable[[], bool], max_files: int) -> None:
        self._should_stop = should_stop
        self._max_files = max_files
        self._seen = 0

    def __call__(self, _entry: ManifestEntry | FileScanTask) -> bool:
        self._seen += 1
        if self._seen > self._max_files:
            raise TooManyFilesError(
                f"the scan selects more than {self._max_files} files; narrow it with a filter"
            )
        if self._should_stop():
            raise PlanStopped("planning was cancelled")
        return True


def plan_files(
    scan: Scan, io: FileIO, guard: Guard, manifests: Sequence[ManifestFile] | None = None
) -> list[FileScanTask]:
    """Plan the scan (blocking), from `manifests` (`scan.manifests`, read already) or the snapshot's
    manifest list. Raises UnprocessableError for what pyiceberg cannot plan, TooManyFilesError,
    PlanStopped; reading errors propagate as OSError."""
    try:
        if scan.incremental is not None:
            start, end = scan.incremental
            if start == end:
                return []
            tasks = list(
                IncrementalAppendScan(
                    table_metadata=scan.metadata,
                    io=io,
                    row_filter=scan.row_filter,
                    case_sensitive=scan.case_sensitive,
                    from_snapshot_id=start,
                    to_snapshot_id=end,
                ).plan_files()
            )
            for task in tasks:  # no per-entry hook in pyiceberg's incremental planner: check after
                guard(task)
            return tasks
        if scan.snapshot is None:
            return []
        planner = ManifestGroupPlanner(
            table_metadata=scan.metadata,
            io=io,
            row_filter=scan.row_filter,
            case_sensitive=scan.case_sensitive,
        )
        if manifests is None:
            manifests = scan.snapshot.manifests(io)
        return list(planner.plan_files(manifests, manifest_entry_filter=guard))
    except ValueError as err:
        # pyiceberg refuses what it cannot plan (equality deletes, unknown content) with ValueError.
        raise UnprocessableError(f"cannot plan this scan on the server: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0][:300]
