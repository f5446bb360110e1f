"""What a change does to a table or view, derived from the metadata before and after it.

Authorization decides on effects, not on the wording of a request: the same end state can be
spelled in many ways (field names instead of wire names, `remove-snapshots` of the snapshot a
branch points at, a rename into another namespace). So the catalog first plans a change (checks
the requirements, applies the updates), then compares the base metadata with the new one and
describes the difference in Iceberg's own update vocabulary:

    set-snapshot-ref / remove-snapshot-ref   a ref was created or moved / removed (`refs` names them)
    add-snapshot / remove-snapshots          snapshots appeared / disappeared
    add-schema / remove-schemas / set-current-schema
    add-spec / remove-partition-specs / set-default-spec
    add-sort-order / set-default-sort-order
    set-location, set-properties / remove-properties (`property_keys` names them)
    set-statistics / remove-statistics, set-partition-statistics / remove-partition-statistics
    upgrade-format-version, assign-uuid
    add-view-version / set-current-view-version (views)

An object that appears (create, register, the target of a rename across namespaces) is judged as
creating everything it carries; one that leaves (the source of such a rename) as removing it.

An identifier is not an identity: everything the metadata keys by id (snapshots, schemas, partition
specs, sort orders, view versions) is compared by content, so an id that names other content after
the change counts as that item removed and another added, and a current schema (spec, sort order,
view version) whose content changed under the same id was set. A ref moves when its tuple changes
or when the history reachable from it does: every snapshot on it, from the ref's snapshot back
through its parents, must be the snapshot it was (manifest list, sequence number, schema id,
summary, everything but a parent link cut because that parent was expired). The history may only
lose its oldest part, which is what expiring old snapshots does.

The catalog never decides: it hands the effects of a change to an `EffectGate` it is given, which
raises to refuse. Nothing is written before the gate has allowed every effect of the change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.metadata_ids import schema_identity


@dataclass(frozen=True, slots=True)
class Effect:
    """The effect of one change on one table or view (`kind` is "table" or "view")."""

    identifier: Identifier
    kind: str
    creates: bool  # the object comes into existence at `identifier`
    update_kinds: frozenset[str]
    refs: frozenset[str] = frozenset()  # refs created, moved or removed
    property_keys: frozenset[str] = frozenset()  # properties set, changed or removed
    # The properties (grants) of the namespaces from the top level down to the object's own, as
    # read from the database with the version the change was planned on (None where a namespace
    # does not exist); None when the plan did not read them, and the gate reads them itself.
    namespaces_read: tuple[Mapping[str, str] | None, ...] | None = None

    @property
    def changes_anything(self) -> bool:
        return self.creates or bool(self.update_kinds)


# Raises (the gateway raises its ForbiddenError) to refuse; returns to allow every effect.
EffectGate = Callable[[Sequence[Effect]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Facets:
    """The parts of an object's metadata whose changes authorization can see."""

    uuid: str
    format_version: int
    location: str
    properties: Mapping[str, str]
    # Everything keyed by id maps the id to the item itself: its content is compared, not its id.
    schemas: Mapping[int, Schema]
    current_schema: int | None
    refs: Mapping[str, tuple[object, ...]] = field(default_factory=dict)
    snapshots: Mapping[int, Snapshot] = field(default_factory=dict)
    specs: Mapping[int, object] = field(default_factory=dict)
    default_spec: int | None = None
    sort_orders: Mapping[int, object] = field(default_factory=dict)
    default_sort_order: int | None = None
    statistics: Mapping[int, str] = field(default_factory=dict)
    partition_statistics: Mapping[int, str] = field(default_factory=dict)
    versions: Mapping[int, object] = field(default_factory=dict)
    current_version: int | None = None


_NOTHING = _Facets("", 0, "", {}, {}, None)


def _table_facets(metadata: TableMetadata) -> _Facets:
    return _Facets(
        uuid=str(metadata.table_uuid),
        format_version=metadata.format_version,
        location=metadata.location,
        properties=dict(metadata.properties),
        schemas={s.schema_id: s for s in metadata.schemas},
        current_schema=metadata.current_schema_id,
        refs={
            name: (
                ref.snapshot_id,
                ref.snapshot_ref_type,
                ref.min_snapshots_to_keep,
                ref.max_snapshot_age_ms,
                ref.max_ref_age_ms,
            )
            for name, ref in metadata.refs.items()
        },
        snapshots={s.snapshot_id: s for s in metadata.snapshots},
        specs={s.spec_id: s for s in metadata.partition_specs},
        default_spec=metadata.default_spec_id,
        sort_orders={o.order_id: o for o in metadata.sort_orders},
        default_sort_order=metadata.default_sort_order_id,
        statistics={s.snapshot_id: s.statistics_path for s in metadata.statistics},
        partition_statistics={s.snapshot_id: s.statistics_path for s in metadata.partition_statistics},
    )


def _view_facets(metadata: ViewMetadata) -> _Facets:
    current = next((v for v in metadata.versions if v.version_id == metadata.current_version_id), None)
    return _Facets(
        uuid=str(metadata.view_uuid),
        format_version=metadata.format_version,
        location=metadata.location,
        properties=dict(metadata.properties),
        schemas={s.schema_id: s for s in metadata.schemas},
        # A view's schema is the one its current version names.
        current_schema=current.schema_id if current is not None else None,
        versions={v.version_id: v for v in metadata.versions},
        current_version=metadata.current_version_id,
    )


K = TypeVar("K")
V = TypeVar("V")


def _equal(before: Any, after: Any) -> bool:
    return before is after or bool(before == after)


def _same_schema(before: Schema, after: Schema) -> bool:
    # Not Schema.__eq__: it calls a schema without fields unequal to every schema.
    return before is after or schema_identity(before) == schema_identity(after)


def _same_snapshot(before: Snapshot, after: Snapshot, now: Mapping[int, Snapshot]) -> bool:
    """Whether `after` is the snapshot `before` was. Expiring a snapshot cuts its children's
    parent links (pyiceberg sets them to None); that alone leaves a snapshot what it was."""
    if before is after:
        return True
    cut = after.parent_snapshot_id is None and before.parent_snapshot_id not in now
    if before.parent_snapshot_id != after.parent_snapshot_id and not cut:
        return False
    unlinked = {"parent_snapshot_id": None}
    return bool(before.model_copy(update=unlinked) == after.model_copy(update=unlinked))


def _by_id(
    kinds: set[str],
    before: Mapping[int, V],
    after: Mapping[int, V],
    same: Callable[[V, V], bool],
    names: tuple[str, str],
) -> set[int]:
    """Name what appeared (`names[0]`) and disappeared (`names[1]`) among items keyed by id; an
    id that names other content counts as both. Returns the ids whose content changed."""
    added, removed = names
    # Most items are the very objects they were (a change shares what it does not touch).
    changed = {
        key
        for key in before.keys() & after.keys()
        if before[key] is not after[key] and not same(before[key], after[key])
    }
    if changed or after.keys() - before.keys():
        kinds.add(added)
    if changed or before.keys() - after.keys():
        kinds.add(removed)
    return changed


def _current_set(before: int | None, after: int | None, changed: set[int]) -> bool:
    """Whether the current item was set: another id, or the same id naming other content."""
    return after is not None and (before != after or after in changed)


def _changed_keys(before: Mapping[K, object], after: Mapping[K, object]) -> set[K]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


class _Histories:
    """Whether the history reachable from a snapshot is kept by a change, with each snapshot's
    verdict remembered: refs share their ancestors, so each snapshot is walked once."""

    def __init__(self, before: Mapping[int, Snapshot], after: Mapping[int, Snapshot]) -> None:
        self._before, self._after = before, after
        self._kept: dict[int, bool] = {}

    def kept(self, head: int) -> bool:
        """True when every snapshot reachable from `head` after the change is the snapshot that
        was at that place in the history before it; the history may only have lost its oldest
        part (expired ancestors). A snapshot that was not there, or differs, is a change."""
        walked: dict[int, None] = {}  # in order, with O(1) membership (histories can be long)
        verdict = True
        snapshot_id: int | None = head
        while snapshot_id is not None and snapshot_id in self._after:
            if snapshot_id in self._kept:
                verdict = self._kept[snapshot_id]
                break
            if snapshot_id in walked:  # a cycle in registered metadata: walked once is enough
                break
            walked[snapshot_id] = None
            old, new = self._before.get(snapshot_id), self._after[snapshot_id]
            if old is None or not _same_snapshot(old, new, self._after):
                verdict = False
                break
            snapshot_id = new.parent_snapshot_id
        for walked_id in walked:
            self._kept[walked_id] = verdict
        return verdict


def _reachable_changes(old: _Facets, now: _Facets, heads: set[object]) -> bool:
    """Whether a history from `heads` can reach a snapshot that is not the very object it was.

    A history reaches such a snapshot only through a head or a parent link; when none leads to
    one (an append: the new snapshot is nobody's parent), every history from `heads` is kept and
    none need be walked."""
    different = {key for key, snap in now.snapshots.items() if old.snapshots.get(key) is not snap}
    if not different:
        return False
    return not different.isdisjoint(heads) or any(
        snap.parent_snapshot_id in different for snap in now.snapshots.values()
    )


def _moved_refs(old: _Facets, now: _Facets) -> set[str]:
    """Refs created, removed, re-pointed or re-configured, and refs whose history changed."""
    refs = _changed_keys(old.refs, now.refs)
    kept_refs = old.refs.keys() & now.refs.keys() - refs
    if not kept_refs or not _reachable_changes(old, now, {now.refs[name][0] for name in kept_refs}):
        return refs
    histories = _Histories(old.snapshots, now.snapshots)
    for name in kept_refs:
        head = now.refs[name][0]
        if isinstance(head, int) and not histories.kept(head):
            refs.add(name)
    return refs


def _diff(identifier: Identifier, kind: str, base: _Facets | None, new: _Facets | None) -> Effect:
    """The effect of going from `base` to `new` (None: the object does not exist on that side)."""
    old, now = base or _NOTHING, new or _NOTHING
    kinds: set[str] = set()
    refs = _moved_refs(old, now)
    for ref in refs:
        kinds.add("set-snapshot-ref" if ref in now.refs else "remove-snapshot-ref")

    def same_snapshot(before: Snapshot, after: Snapshot) -> bool:
        return _same_snapshot(before, after, now.snapshots)

    _by_id(kinds, old.snapshots, now.snapshots, same_snapshot, ("add-snapshot", "remove-snapshots"))
    changed = _by_id(kinds, old.schemas, now.schemas, _same_schema, ("add-schema", "remove-schemas"))
    if _current_set(old.current_schema, now.current_schema, changed):
        kinds.add("set-current-schema")
    changed = _by_id(kinds, old.specs, now.specs, _equal, ("add-spec", "remove-partition-specs"))
    if _current_set(old.default_spec, now.default_spec, changed):
        kinds.add("set-default-spec")
    changed = _by_id(
        kinds, old.sort_orders, now.sort_orders, _equal, ("add-sort-order", "remove-sort-orders")
    )
    if _current_set(old.default_sort_order, now.default_sort_order, changed):
        kinds.add("set-default-sort-order")
    changed = _by_id(kinds, old.versions, now.versions, _equal, ("add-view-version", "remove-view-versions"))
    if _current_set(old.current_version, now.current_version, changed):
        kinds.add("set-current-view-version")
    if now.location and old.location != now.location:
        kinds.add("set-location")
    property_keys = _changed_keys(old.properties, now.properties)
    if any(key in now.properties for key in property_keys):
        kinds.add("set-properties")
    if any(key not in now.properties for key in property_keys):
        kinds.add("remove-properties")
    for before, after, added, removed in (
        (old.statistics, now.statistics, "set-statistics", "remove-statistics"),
        (
            old.partition_statistics,
            now.partition_statistics,
            "set-partition-statistics",
            "remove-partition-statistics",
        ),
    ):
        for snapshot in _changed_keys(before, after):
            kinds.add(added if snapshot in after else removed)
    if new is not None and old.format_version != now.format_version:
        kinds.add("upgrade-format-version")
    if new is not None and old.uuid != now.uuid:
        kinds.add("assign-uuid")
    return Effect(
        identifier=identifier,
        kind=kind,
        creates=base is None and new is not None,
        update_kinds=frozenset(kinds),
        refs=frozenset(refs),
        property_keys=frozenset(property_keys),
    )


def of_table_change(identifier: Identifier, base: TableMetadata | None, new: TableMetadata) -> Effect:
    """What committing `new` over `base` (None: the table is created) does."""
    return _diff(identifier, "table", None if base is None else _table_facets(base), _table_facets(new))


def of_view_change(identifier: Identifier, base: ViewMetadata | None, new: ViewMetadata) -> Effect:
    """What committing `new` over `base` (None: the view is created) does."""
    return _diff(identifier, "view", None if base is None else _view_facets(base), _view_facets(new))


def _facets(metadata: TableMetadata | ViewMetadata) -> tuple[str, _Facets]:
    if isinstance(metadata, ViewMetadata):
        return "view", _view_facets(metadata)
    return "table", _table_facets(metadata)


def of_arrival(identifier: Identifier, metadata: TableMetadata | ViewMetadata) -> Effect:
    """What bringing an existing object to `identifier` does: it creates everything it carries."""
    kind, facets = _facets(metadata)
    return _diff(identifier, kind, None, facets)


def of_departure(identifier: Identifier, metadata: TableMetadata | ViewMetadata) -> Effect:
    """What taking an object away from `identifier` does: it removes everything it carries."""
    kind, facets = _facets(metadata)
    return _diff(identifier, kind, facets, None)


def of_move(
    source: Identifier, target: Identifier, kind: str, metadata: TableMetadata | ViewMetadata | None
) -> tuple[Effect, ...]:
    """What a rename does. Within one namespace the object stays under the same grants and guards:
    no content changes (and `metadata` is not needed). Across namespaces it leaves the source and
    arrives at the target, so a rename can never carry guarded state out of, or into, a guarded
    namespace unjudged. Raises ValueError without `metadata` for a move across namespaces."""
    if source.namespace == target.namespace:
        return (Effect(source, kind, False, frozenset()),)
    if metadata is None:
        raise ValueError("a move across namespaces is judged on the object's metadata")
    return (of_departure(source, metadata), of_arrival(target, metadata))
