"""What a policy set can see of a resource, and the decision-cache key that keeps only that.

A decision about a resource that did not exist a moment ago (a namespace or table being created,
one being looked up by a new name) can never hit a cache keyed by the resource's whole entity:
its id is new. Yet a policy set usually cannot tell two such resources apart: Cedar reaches a
resource only through its uid (compared with the uid literals the policies write, or with
another entity value), its attributes (by name: `resource.x`, `resource has x`), its tags
(`getTag`/`hasTag`) and its ancestors (`in`). So the key of a decision keeps exactly those:

- the resource's type, its parents (and, through the parent's entity JSON, every ancestor);
- its id only when a policy names that very uid as a literal (the one way its id can matter);
- the attributes whose names any policy reads, anywhere, of any entity (conservative);
- its tags only when any policy reads tags at all.

Two requests with equal keys (and equal principal, action and context, which the key also
holds) are decided alike by every policy of the set: each operation Cedar can apply to the
resource gives the same result for both. This rests on one invariant of the entities the gateway
builds (`entities.py`): no attribute, tag or context value is an entity reference, so the
resource's uid can be compared only with a policy's literals and with the request's other uids,
which have other types. `decision_key` checks the literal case for every key it makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from cedarberg.gateway.authz.entities import Resource

_TAG_OPERATIONS = frozenset({"getTag", "hasTag"})


@dataclass(frozen=True, slots=True)
class PolicySight:
    """What the policies of one set read, from their JSON (EST) form."""

    attributes: frozenset[str]  # every attribute name read or tested with `has`
    uid_literals: frozenset[tuple[str, str]]  # (type, id) of every entity the policies name
    reads_tags: bool

    @classmethod
    def of(cls, policies: Iterable[Mapping[str, Any]]) -> PolicySight:
        attributes: set[str] = set()
        literals: set[tuple[str, str]] = set()
        reads_tags = False
        stack: list[Any] = list(policies)
        while stack:
            node = stack.pop()
            if isinstance(node, list):
                stack.extend(node)
                continue
            if not isinstance(node, dict):
                continue
            # An entity literal, as a value (`__entity`) or in a scope constraint (`type`/`id`).
            entity = node.get("__entity", node)
            if isinstance(entity, dict) and isinstance(entity.get("type"), str) and "id" in entity:
                literals.add((entity["type"], str(entity["id"])))
            attr = node.get("attr")  # `.` and `has`; a `has` path may come as a list of names
            attributes.update([attr] if isinstance(attr, str) else attr if isinstance(attr, list) else ())
            if not _TAG_OPERATIONS.isdisjoint(node):
                reads_tags = True
            stack.extend(node.values())
        return cls(frozenset(attributes), frozenset(literals), reads_tags)

    def decision_key(self, resource: Resource) -> str:
        """The part of `resource` a decision of this set can depend on, as a string."""
        leaf = resource.entities[0]
        uid = leaf["uid"]
        attrs = leaf["attrs"]
        seen = {name: attrs[name] for name in attrs if name in self.attributes}
        named = uid["id"] if (uid["type"], uid["id"]) in self.uid_literals else None
        tags = leaf.get("tags") if self.reads_tags else None
        key = (uid["type"], seen, leaf["parents"], named, tags)
        ancestors = resource.parent.entities_json if resource.parent is not None else "[]"
        return orjson.dumps(key).decode() + ancestors
