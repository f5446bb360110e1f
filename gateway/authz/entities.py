"""Cedar entities and uids, built from plain values (no HTTP, no store).

The resource hierarchy mirrors the catalog, so a policy on an ancestor covers its descendants
through Cedar's `in`:

    Catalog::"cedarberg" > Warehouse > Namespace > Namespace ... > Table | View
    Catalog::"cedarberg" > ApiKey

Entity ids are readable paths: `Warehouse::"default"`, `Namespace::"default/sales.eu"`,
`Table::"default/sales.eu/orders"`. Inside a name the characters ``%``, ``/`` and ``.`` are
%-encoded, so every id is unambiguous (`encode_name`).

Grants are namespace (or warehouse) properties, inherited by everything below (`Grants`):

    cedarberg.readers        = analysts,bi     groups that may read
    cedarberg.writers        = etl             groups that may read and write
    cedarberg.protected-refs = main            refs only admins may move (default policies)
    cedarberg.schema-locked  = true            only admins may change schemas (default policies)

Inheritance is a union (a child namespace can add groups or refs, never remove what a parent set),
so whoever may create a child namespace cannot escape a parent's guard. The effective properties
(nearest namespace wins) are attached to every resource as Cedar entity tags.

Promises: every entity built here conforms to `policies/schema.cedarschema` (the engine checks this
contract whenever it loads a policy set); builders never raise for well-formed names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from cedarberg.gateway.authn.principal import Principal, PrincipalKind
from cedarberg.gateway.authz.errors import ResourceError

CEDAR_NAMESPACE = "Cedarberg"
CATALOG_ID = "cedarberg"

READERS_PROPERTY = "cedarberg.readers"
WRITERS_PROPERTY = "cedarberg.writers"
PROTECTED_REFS_PROPERTY = "cedarberg.protected-refs"
SCHEMA_LOCKED_PROPERTY = "cedarberg.schema-locked"

JsonDict = dict[str, Any]


class EntityType(StrEnum):
    GROUP = "Group"
    USER = "User"
    SERVICE = "Service"
    ANONYMOUS = "Anonymous"
    CATALOG = "Catalog"
    API_KEY = "ApiKey"
    WAREHOUSE = "Warehouse"
    NAMESPACE = "Namespace"
    TABLE = "Table"
    VIEW = "View"

    @property
    def cedar_type(self) -> str:
        return f"{CEDAR_NAMESPACE}::{self.value}"


ACTION_TYPE = f"{CEDAR_NAMESPACE}::Action"

_PRINCIPAL_TYPES = {
    PrincipalKind.USER: EntityType.USER,
    PrincipalKind.SERVICE: EntityType.SERVICE,
    PrincipalKind.ANONYMOUS: EntityType.ANONYMOUS,
}


@dataclass(frozen=True, slots=True)
class EntityUid:
    """A Cedar entity uid; `type` is the fully qualified type name (``Cedarberg::Table``)."""

    type: str
    id: str

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "id": self.id}

    def __str__(self) -> str:
        # json.dumps-style quoting is valid Cedar string syntax for any id.
        return f"{self.type}::{orjson.dumps(self.id).decode()}"

    @classmethod
    def of(cls, kind: EntityType, id_: str) -> EntityUid:
        return cls(kind.cedar_type, id_)

    @classmethod
    def action(cls, name: str) -> EntityUid:
        return cls(ACTION_TYPE, name)


# -- names ---------------------------------------------------------------------------------------

_ENCODE = {"%": "%25", "/": "%2F", ".": "%2E"}


def encode_name(name: str) -> str:
    """Encode one name (warehouse, namespace level, table) for use inside an entity id."""
    return "".join(_ENCODE.get(ch, ch) for ch in name)


def decode_name(encoded: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(encoded):
        if encoded[i] == "%":
            code = encoded[i : i + 3].upper()
            decoded = {v: k for k, v in _ENCODE.items()}.get(code)
            if decoded is None:
                raise ResourceError(f"bad escape {encoded[i : i + 3]!r} in {encoded!r}")
            out.append(decoded)
            i += 3
        else:
            out.append(encoded[i])
            i += 1
    return "".join(out)


def namespace_id(warehouse: str, levels: Sequence[str]) -> str:
    return f"{encode_name(warehouse)}/{'.'.join(encode_name(level) for level in levels)}"


def object_id(warehouse: str, levels: Sequence[str], name: str) -> str:
    return f"{namespace_id(warehouse, levels)}/{encode_name(name)}"


def parse_path(path: str) -> tuple[str, tuple[str, ...], str | None]:
    """Parse ``WAREHOUSE[/NS.NS[/NAME]]`` (the entity-id form) into warehouse, levels and name."""
    parts = path.split("/")
    if not parts[0] or len(parts) > 3 or any(not p for p in parts):
        raise ResourceError(f"not a resource path: {path!r} (expected WAREHOUSE[/NS.NS[/NAME]])")
    warehouse = decode_name(parts[0])
    levels = tuple(decode_name(level) for level in parts[1].split(".")) if len(parts) > 1 else ()
    if any(not level for level in levels):
        raise ResourceError(f"empty namespace level in {path!r}")
    name = decode_name(parts[2]) if len(parts) == 3 else None
    return warehouse, levels, name


# -- grants --------------------------------------------------------------------------------------


def _name_list(value: str | None) -> frozenset[str]:
    if not value:
        return frozenset()
    return frozenset(item.strip() for item in value.split(",") if item.strip())


@dataclass(frozen=True, slots=True)
class Grants:
    """The grant attributes of one resource (already inherited from its ancestors)."""

    readers: frozenset[str] = frozenset()
    writers: frozenset[str] = frozenset()
    protected_refs: frozenset[str] = frozenset()
    schema_locked: bool = False

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> Grants:
        """The grants one set of properties declares by itself."""
        return cls(
            readers=_name_list(properties.get(READERS_PROPERTY)),
            writers=_name_list(properties.get(WRITERS_PROPERTY)),
            protected_refs=_name_list(properties.get(PROTECTED_REFS_PROPERTY)),
            schema_locked=properties.get(SCHEMA_LOCKED_PROPERTY, "").strip().lower() == "true",
        )

    def inherit(self, child: Grants) -> Grants:
        """The effective grants of a child: a union, so a child never loosens a parent's guard."""
        return Grants(
            readers=self.readers | child.readers,
            writers=self.writers | child.writers,
            protected_refs=self.protected_refs | child.protected_refs,
            schema_locked=self.schema_locked or child.schema_locked,
        )

    def to_attrs(self) -> JsonDict:
        return {
            "readers": sorted(self.readers),
            "writers": sorted(self.writers),
            "protected_refs": sorted(self.protected_refs),
            "schema_locked": self.schema_locked,
        }


# -- resources -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Resource:
    """A Cedar resource with its ancestors, ready for a decision.

    `entities_json` is the JSON array of this entity and all its ancestors; it doubles as the
    cache key of the parsed entity set, so two equal resources share one parsed handle.
    """

    kind: EntityType
    uid: EntityUid
    warehouse: str | None
    namespace: tuple[str, ...]
    name: str | None
    parent: Resource | None
    grants: Grants
    tags: Mapping[str, str] = field(repr=False)
    entities: tuple[JsonDict, ...] = field(repr=False)
    entities_json: str = field(repr=False)

    def __str__(self) -> str:
        return str(self.uid)

    def __repr__(self) -> str:
        return f"Resource({self.uid})"


@dataclass(frozen=True, slots=True)
class _Carried:
    """What a resource carries for the gateway beside its Cedar entity: where it is, the grants
    it inherits and the tags (properties) policies may read."""

    warehouse: str | None = None
    namespace: tuple[str, ...] = ()
    name: str | None = None
    grants: Grants = Grants()
    tags: Mapping[str, str] | None = None


def _resource(
    kind: EntityType, id_: str, attrs: JsonDict, parent: Resource | None, carried: _Carried = _Carried()
) -> Resource:
    warehouse, namespace, name = carried.warehouse, carried.namespace, carried.name
    grants, tags = carried.grants, carried.tags
    uid = EntityUid.of(kind, id_)
    entity: JsonDict = {
        "uid": uid.to_json(),
        "attrs": attrs,
        "parents": [parent.uid.to_json()] if parent else [],
    }
    if tags is not None:
        entity["tags"] = dict(tags)
    entities = (entity, *(parent.entities if parent else ()))
    return Resource(
        kind=kind,
        uid=uid,
        warehouse=warehouse,
        namespace=namespace,
        name=name,
        parent=parent,
        grants=grants,
        tags=dict(tags or {}),
        entities=entities,
        entities_json=orjson.dumps(entities).decode(),
    )


_CATALOG: Resource | None = None


def catalog_resource() -> Resource:
    """The root of everything: the target of admin actions (API keys, policies)."""
    global _CATALOG  # noqa: PLW0603 - an immutable value built once
    if _CATALOG is None:
        _CATALOG = _resource(EntityType.CATALOG, CATALOG_ID, {}, None)
    return _CATALOG


def api_key_resource(key_id: str, owner: str) -> Resource:
    """An API key; `owner` is the (namespaced, `key:<name>`) id of the principal the key
    authenticates as."""
    return _resource(EntityType.API_KEY, key_id, {"owner": owner}, catalog_resource(), _Carried(name=key_id))


def warehouse_resource(warehouse: str, properties: Mapping[str, str] | None = None) -> Resource:
    """A warehouse; `properties` (from configuration) may carry grants for the whole warehouse."""
    props = dict(properties or {})
    grants = Grants.of(props)
    return _resource(
        EntityType.WAREHOUSE,
        encode_name(warehouse),
        {"warehouse": warehouse, **grants.to_attrs()},
        catalog_resource(),
        _Carried(warehouse=warehouse, grants=grants, tags=props),
    )


def child_namespace(parent: Resource, level: str, properties: Mapping[str, str] | None = None) -> Resource:
    """The namespace `level` directly inside `parent` (a warehouse or a namespace)."""
    if parent.kind not in (EntityType.WAREHOUSE, EntityType.NAMESPACE) or parent.warehouse is None:
        raise ResourceError(f"a namespace cannot be inside {parent.uid}")
    props = dict(properties or {})
    levels = (*parent.namespace, level)
    grants = parent.grants.inherit(Grants.of(props))
    return _resource(
        EntityType.NAMESPACE,
        namespace_id(parent.warehouse, levels),
        {
            "warehouse": parent.warehouse,
            "namespace": ".".join(levels),
            "depth": len(levels),
            **grants.to_attrs(),
        },
        parent,
        _Carried(warehouse=parent.warehouse, namespace=levels, grants=grants, tags={**parent.tags, **props}),
    )


def namespace_resource(
    warehouse: str,
    levels: Sequence[str],
    chain: Sequence[Mapping[str, str]] = (),
    *,
    warehouse_properties: Mapping[str, str] | None = None,
) -> Resource:
    """The namespace `levels` of `warehouse`.

    `chain[i]` holds the properties of the namespace `levels[: i + 1]`; a shorter chain (a namespace
    that does not exist yet, or that the caller did not load) counts as no properties.
    """
    if not levels:
        raise ResourceError("a namespace needs at least one level")
    node = warehouse_resource(warehouse, warehouse_properties)
    for i, level in enumerate(levels):
        node = child_namespace(node, level, chain[i] if i < len(chain) else None)
    return node


def _child_object(kind: EntityType, namespace: Resource, name: str) -> Resource:
    if namespace.kind is not EntityType.NAMESPACE or namespace.warehouse is None:
        raise ResourceError(f"a {kind.value.lower()} must be inside a namespace, not {namespace.uid}")
    return _resource(
        kind,
        object_id(namespace.warehouse, namespace.namespace, name),
        {
            "warehouse": namespace.warehouse,
            "namespace": ".".join(namespace.namespace),
            "name": name,
            **namespace.grants.to_attrs(),
        },
        namespace,
        _Carried(namespace.warehouse, namespace.namespace, name, namespace.grants, namespace.tags),
    )


def child_table(namespace: Resource, name: str) -> Resource:
    """The table `name` in an already built namespace resource (cheap: for filtering listings)."""
    return _child_object(EntityType.TABLE, namespace, name)


def child_view(namespace: Resource, name: str) -> Resource:
    return _child_object(EntityType.VIEW, namespace, name)


def table_resource(
    warehouse: str,
    levels: Sequence[str],
    name: str,
    chain: Sequence[Mapping[str, str]] = (),
    *,
    warehouse_properties: Mapping[str, str] | None = None,
) -> Resource:
    """The table `name` in namespace `levels` (see `namespace_resource` for `chain`)."""
    namespace = namespace_resource(warehouse, levels, chain, warehouse_properties=warehouse_properties)
    return child_table(namespace, name)


# -- principals ----------------------------------------------------------------------------------


def principal_uid(principal: Principal) -> EntityUid:
    return EntityUid.of(_PRINCIPAL_TYPES[principal.kind], principal.id)


def principal_entities(principal: Principal) -> list[JsonDict]:
    """The principal (a member of its groups, attributes as tags) and its group entities."""
    groups = sorted(principal.groups)
    group_uids = [EntityUid.of(EntityType.GROUP, g).to_json() for g in groups]
    me: JsonDict = {
        "uid": principal_uid(principal).to_json(),
        "attrs": {"groups": groups},
        "parents": group_uids,
        "tags": dict(principal.attributes),
    }
    return [me, *({"uid": g, "attrs": {}, "parents": []} for g in group_uids)]
