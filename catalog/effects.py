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

The catalog never decides: it hands the effects of a change to an `EffectGate` it is given, which
raises to refuse. Nothing is written before the gate has allowed every effect of the change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog.identifiers import Identifier


@dataclass(frozen=True, slots=True)
class Effect:
    """The effect of one change on one table or view (`kind` is "table" or "view")."""

    identifier: Identifier
    kind: str
    creates: bool  # the object comes into existence at `identifier`
    update_kinds: frozenset[str]
    refs: frozenset[str] = frozenset()  # refs created, moved or removed
    property_keys: frozenset[str] = frozenset()  # properties set, changed or removed

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
    schemas: frozenset[int]
    current_schema: int | None
    refs: Mapping[str, tuple[object, ...]] = field(default_factory=dict)
    snapshots: frozenset[int] = frozenset()
    specs: frozenset[int] = frozenset()
    default_spec: int | None = None
    sort_orders: frozenset[int] = frozenset()
    default_sort_order: int | None = None
    statistics: Mapping[int, str] = field(default_factory=dict)
    partition_statistics: Mapping[int, str] = field(default_factory=dict)
    versions: frozenset[int] = frozenset()
    current_version: int | None = None


_NOTHING = _Facets("", 0, "", {}, frozenset(), None)


def _table_facets(metadata: TableMetadata) -> _Facets:
    return _Facets(
        uuid=str(metadata.table_uuid),
        format_version=metadata.format_version,
        location=metadata.location,
        properties=dict(metadata.properties),
        schemas=frozenset(s.schema_id for s in metadata.schemas),
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
        snapshots=frozenset(s.snapshot_id for s in metadata.snapshots),
        specs=frozenset(s.spec_id for s in metadata.partition_specs),
        default_spec=metadata.default_spec_id,
        sort_orders=frozenset(o.order_id for o in metadata.sort_orders),
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
        schemas=frozenset(s.schema_id for s in metadata.schemas),
        # A view's schema is the one its current version names.
        current_schema=current.schema_id if current is not None else None,
        versions=frozenset(v.version_id for v in metadata.versions),
        current_version=metadata.current_version_id,
    )


def _added_removed(
    kinds: set[str], before: frozenset[int], after: frozenset[int], added: str, removed: str
) -> None:
    if after - before:
        kinds.add(added)
    if before - after:
        kinds.add(removed)


K = TypeVar("K")


def _changed_keys(before: Mapping[K, object], after: Mapping[K, object]) -> set[K]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def _diff(identifier: Identifier, kind: str, base: _Facets | None, new: _Facets | None) -> Effect:
    """The effect of going from `base` to `new` (None: the object does not exist on that side)."""
    old, now = base or _NOTHING, new or _NOTHING
    kinds: set[str] = set()
    refs = _changed_keys(old.refs, now.refs)
    for ref in refs:
        kinds.add("set-snapshot-ref" if ref in now.refs else "remove-snapshot-ref")
    _added_removed(kinds, old.snapshots, now.snapshots, "add-snapshot", "remove-snapshots")
    _added_removed(kinds, old.schemas, now.schemas, "add-schema", "remove-schemas")
    if now.current_schema is not None and old.current_schema != now.current_schema:
        kinds.add("set-current-schema")
    _added_removed(kinds, old.specs, now.specs, "add-spec", "remove-partition-specs")
    if now.default_spec is not None and old.default_spec != now.default_spec:
        kinds.add("set-default-spec")
    _added_removed(kinds, old.sort_orders, now.sort_orders, "add-sort-order", "remove-sort-orders")
    if now.default_sort_order is not None and old.default_sort_order != now.default_sort_order:
        kinds.add("set-default-sort-order")
    _added_removed(kinds, old.versions, now.versions, "add-view-version", "remove-view-versions")
    if now.current_version is not None and old.current_version != now.current_version:
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
