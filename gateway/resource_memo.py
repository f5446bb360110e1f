"""Cedar resources reused between requests while what they were built from is unchanged.

Building a resource (its entity with the grants of its namespace chain, and their JSON) costs more
than the rest of an authorized read. The read path gets its namespace properties from the
registry's read cache (`catalog.store.cache`), which returns the same dict objects until an entry is
refreshed or forgotten; a memoised resource is reused only while every dict it was built from is
that same object (identity, which the memo keeps alive, so it cannot be recycled) — a refreshed or
changed grant is a different object, and the resource is built again.

Bounded in entries and in estimated bytes (a resource's entity JSON, which carries its ancestors'
grants and properties, with its parsed form counted alike), least recently used first; a resource
larger than `MAX_ENTRY_BYTES` is built for each request instead of being kept (`gateway.byte_lru`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from cedarberg.gateway.authz import entities
from cedarberg.gateway.authz.entities import Resource
from cedarberg.gateway.byte_lru import ByteBoundedLru

DEFAULT_MAX_ENTRIES = 8192
DEFAULT_MAX_BYTES = 32 * 1024**2
MAX_ENTRY_BYTES = 256 * 1024
# The entity JSON string, the entity dicts it was rendered from and the tags: about three copies.
_COPIES = 3


def _resource_bytes(resource: Resource) -> int:
    return _COPIES * len(resource.entities_json) + len(str(resource.uid))


class ResourceMemo:
    """Used from the event loop only."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_entries = max_entries
        self._entries: ByteBoundedLru[Hashable, tuple[tuple[Any, ...], Resource]] = ByteBoundedLru(
            max_entries, max_bytes, MAX_ENTRY_BYTES
        )

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def estimated_bytes(self) -> int:
        """Estimated bytes held (at most `max_bytes`)."""
        return self._entries.estimated_bytes

    def namespace(self, warehouse: str, levels: tuple[str, ...], chain: Sequence[dict[str, str]]) -> Resource:
        """`entities.namespace_resource(warehouse, levels, chain)`, reused while `chain` holds the
        same objects."""
        return self._get(
            ("ns", warehouse, levels),
            tuple(chain),
            lambda: entities.namespace_resource(warehouse, levels, chain),
        )

    def warehouse(self, name: str) -> Resource:
        """`entities.warehouse_resource(name)`: it depends on nothing else."""
        return self._get(("wh", name), (), lambda: entities.warehouse_resource(name))

    def child_namespace(self, parent: Resource, level: str, properties: dict[str, str]) -> Resource:
        """The namespace `level` in `parent` with its own `properties` (for listings), reused
        while `parent` and `properties` are the same objects."""
        return self._get(
            ("child-ns", parent.uid, level),
            (parent, properties),
            lambda: entities.child_namespace(parent, level, properties),
        )

    def child(self, parent: Resource, name: str, view: bool) -> Resource:
        """The table (or view) `name` in `parent`, reused while `parent` is the same object."""
        make = entities.child_view if view else entities.child_table
        return self._get(("obj", parent.uid, name, view), (parent,), lambda: make(parent, name))

    def _get(self, key: Hashable, sources: tuple[Any, ...], build: Callable[[], Resource]) -> Resource:
        entry = self._entries.get(key)
        if entry is not None:
            held, resource = entry
            if len(held) == len(sources) and all(a is b for a, b in zip(held, sources, strict=True)):
                return resource
        resource = build()
        self._entries.put(key, (sources, resource), _resource_bytes(resource))
        return resource
