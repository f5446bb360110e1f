"""The grants a decision read, node by node: what `explainDecision` reports as `grants`.

A resource carries the grants of its warehouse and namespaces (`entities.Grants`, inherited as a
union down the chain); a policy reads them as the resource's `readers`, `writers`,
`protected_refs` and `schema_locked` attributes. `grant_chain` lists the grant-bearing nodes the
resource was built from, warehouse first, each with its effective grants (its own properties
joined with every ancestor's), so a reader sees which level added a group or a guard.
"""

from __future__ import annotations

from typing import Any

from cedarberg.gateway.authz.entities import EntityType, Resource

_GRANT_BEARING = frozenset({EntityType.WAREHOUSE, EntityType.NAMESPACE})


def grant_chain(resource: Resource) -> list[dict[str, Any]]:
    """The warehouse and namespaces above (and including) `resource`, outermost first, each as
    `{"resource": uid, "readers": [...], "writers": [...], "protected_refs": [...],
    "schema_locked": bool}`. Empty for the catalog and API keys, which carry no grants."""
    nodes: list[dict[str, Any]] = []
    node: Resource | None = resource
    while node is not None:
        if node.kind in _GRANT_BEARING:
            nodes.append({"resource": str(node.uid), **node.grants.to_attrs()})
        node = node.parent
    nodes.reverse()
    return nodes
