"""A Cedar resource from what names it and where its grants come from: the one way to build one.

Three callers name resources, each from its own input: the pipeline from the request (path, query,
parsed body, as the operation table's `Naming` says: `gateway.web.resources`), `cedarberg policies
explain` from a textual resource (`gateway.authz.cli`), and the admin explain endpoint from its
request body (`gateway.web.routes.admin`). Each turns its input into a `ResourceName` and chooses a
`GrantSource` — the registry's namespace properties, or properties the caller states — and `build`
does the rest, so a resource is the same whichever way it was asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cedarberg.gateway.authz import entities
from cedarberg.gateway.authz.entities import EntityType, Resource
from cedarberg.gateway.authz.errors import ResourceError


@dataclass(frozen=True, slots=True)
class ResourceName:
    """What a resource is, without its grants: its kind, and as much of warehouse, namespace levels
    and name as the kind has. An API key is named by its id (`name`) and its `owner`."""

    kind: EntityType
    warehouse: str = ""
    namespace: tuple[str, ...] = ()
    name: str = ""
    owner: str = ""


class GrantSource(Protocol):
    """Where the properties carrying grants come from. Builds the grant-bearing nodes (a
    warehouse, a namespace with its chain) and the objects inside them."""

    def warehouse(self, warehouse: str) -> Resource: ...

    async def namespace(self, warehouse: str, levels: tuple[str, ...]) -> Resource: ...

    def child(self, parent: Resource, name: str, view: bool) -> Resource: ...


@dataclass(frozen=True, slots=True)
class StatedGrants:
    """Grants the caller states instead of the registry's: `chain[i]` holds the properties of the
    namespace `levels[: i + 1]` (shorter: no properties), `warehouse_properties` the warehouse's."""

    chain: Sequence[Mapping[str, str]] = ()
    warehouse_properties: Mapping[str, str] | None = None

    def warehouse(self, warehouse: str) -> Resource:
        return entities.warehouse_resource(warehouse, self.warehouse_properties)

    async def namespace(self, warehouse: str, levels: tuple[str, ...]) -> Resource:
        return entities.namespace_resource(
            warehouse, levels, self.chain, warehouse_properties=self.warehouse_properties
        )

    def child(self, parent: Resource, name: str, view: bool) -> Resource:
        return entities.child_view(parent, name) if view else entities.child_table(parent, name)

    def over(self, chain: Sequence[Mapping[str, str]]) -> StatedGrants:
        """These grants over `chain` (the registry's properties of the same namespaces): a stated
        key replaces the registry's value on its namespace, every other key stays."""
        length = max(len(chain), len(self.chain))
        merged = [
            {
                **(chain[i] if i < len(chain) else {}),
                **(self.chain[i] if i < len(self.chain) else {}),
            }
            for i in range(length)
        ]
        return StatedGrants(merged, self.warehouse_properties)


def stated_grants(warehouse: str, levels: Sequence[str], properties: Sequence[str]) -> StatedGrants:
    """The grants that `NS:KEY=VALUE` texts (the offline tools' `--property`) state for the
    namespace chain `levels` of `warehouse`; an empty `NS` is the warehouse. Raises
    `ResourceError` for a text of another shape."""
    by_namespace: dict[tuple[str, ...], dict[str, str]] = {}
    for item in properties:
        ns, sep, assignment = item.partition(":")
        key, equals, value = assignment.partition("=")
        if not sep or not equals or not key:
            raise ResourceError(f"a property must look like NS:KEY=VALUE, not {item!r}")
        ns_levels = tuple(entities.parse_path(f"{warehouse}/{ns}")[1]) if ns else ()
        by_namespace.setdefault(ns_levels, {})[key] = value
    chain = [by_namespace.get(tuple(levels[: i + 1]), {}) for i in range(len(levels))]
    return StatedGrants(chain, by_namespace.get((), {}))


async def build(name: ResourceName, grants: GrantSource) -> Resource:
    """The resource `name` names, with the grants of `grants`. Raises `ResourceError` for a kind
    that is not a resource (a principal's)."""
    kind = name.kind
    if kind is EntityType.CATALOG:
        return entities.catalog_resource()
    if kind is EntityType.API_KEY:
        return entities.api_key_resource(name.name, name.owner)
    if kind is EntityType.WAREHOUSE:
        return grants.warehouse(name.warehouse)
    if kind not in (EntityType.NAMESPACE, EntityType.TABLE, EntityType.VIEW):
        raise ResourceError(f"not a resource kind: {kind.value}")
    namespace = await grants.namespace(name.warehouse, name.namespace)
    if kind is EntityType.NAMESPACE:
        return namespace
    return grants.child(namespace, name.name, kind is EntityType.VIEW)
