"""Cedar resources reused between requests while what they were built from is unchanged.

Building a resource (its entity with the grants of its namespace chain, and their JSON) costs more
than the rest of an authorized read. The read path gets its namespace properties from the
registry's read cache (`catalog.store.cache`), which returns the same dict objects until an entry is
refreshed or forgotten; a memoised resource is reused only while every dict it was built from is
that same object (identity, which the memo keeps alive, so it cannot be recycled) — a refreshed or
changed grant is a different object, and the resource is built again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from gateway.authz import entities
from gateway.authz.entities import Resource

DEFAULT_MAX_ENTRIES = 8192


class ResourceMemo:
    """Used from the event loop only."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[tuple[Any, ...], Resource]] = OrderedDict()

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
                self._entries.move_to_end(key)
                return resource
        resource = build()
        if self.max_entries > 0:
            self._entries[key] = (sources, resource)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return resource
