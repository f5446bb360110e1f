"""From an audit record to the explain request that decides it again (`POST /admin/v1/explain`).

    explain_body(record) -> {"principal": ..., "kind": ..., "auth_method": ..., "client_address": ...,
                             "action": ..., "resource": {"type": "table", ...}} | None

The body names what the record names: the principal (its namespaced id, kind and how it
authenticated), the client address, the action and the resource (the Cedar uid of the record,
turned back into the explain endpoint's resource description). Grants are then read from the
catalog as it is now, as the explain endpoint does without `namespace_properties`.

Groups: a record that states `groups` (a list of names) has them copied; otherwise the caller
passes the groups the gateway knows for the principal now (its API keys, the user directory:
`gateway.web.routes.audit_trail`), and without those the body has none, so a decision that rested on
a group is explained as for a principal without it. What a record does not carry, the body
cannot: the principal's attributes and a change's context (refs, update kinds, property keys).
Only `decision` records of Cedar actions get a body; anything else (a mutation's outcome,
aggregated refusals, a record this code cannot read) None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from cedarberg.gateway.authn.principal import AuthMethod, PrincipalKind
from cedarberg.gateway.authz.entities import CEDAR_NAMESPACE, EntityType, decode_name, parse_path
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.operations import OPERATIONS

__all__ = ["explain_body", "explained_resource"]

_UID: Final = re.compile(rf'{CEDAR_NAMESPACE}::([A-Za-z]+)::(".*")', re.S)
_KINDS: Final = frozenset(kind.value for kind in PrincipalKind)
_METHODS: Final = frozenset(method.value for method in AuthMethod)
_MAX_ADDRESS: Final = 64  # the explain request's bound on client_address
_MAX_GROUPS: Final = 64


def explained_resource(uid: str) -> dict[str, Any] | None:
    """The explain endpoint's description of the resource whose Cedar uid is `uid`
    (``Cedarberg::Table::"default/shop/orders"``); None if it is not one."""
    match = _UID.fullmatch(uid)
    if match is None:
        return None
    try:
        entity_id = orjson.loads(match.group(2))
        kind = EntityType(match.group(1))
    except (orjson.JSONDecodeError, ValueError):
        return None
    if not isinstance(entity_id, str):
        return None
    try:
        return _resource(kind, entity_id)
    except ResourceError:
        return None


def _resource(kind: EntityType, entity_id: str) -> dict[str, Any] | None:
    """Raises ResourceError for an id that is not a well-formed path."""
    if kind is EntityType.CATALOG:
        return {"type": "catalog"}
    if kind is EntityType.API_KEY:
        return {"type": "api-key", "id": entity_id}
    if kind is EntityType.WAREHOUSE:
        return {"type": "warehouse", "warehouse": decode_name(entity_id)}
    if kind not in (EntityType.NAMESPACE, EntityType.TABLE, EntityType.VIEW):
        return None
    warehouse, levels, name = parse_path(entity_id)
    if not levels or (name is None) != (kind is EntityType.NAMESPACE):
        return None
    described: dict[str, Any] = {
        "type": kind.value.lower(),
        "warehouse": warehouse,
        "namespace": list(levels),
    }
    if name is not None:
        described["name"] = name
    return described


def _groups(record: Mapping[str, Any]) -> list[str] | None:
    groups = record.get("groups")
    if isinstance(groups, list) and len(groups) <= _MAX_GROUPS and all(isinstance(g, str) for g in groups):
        return list(groups)
    return None


def explain_body(
    record: Mapping[str, Any], known_groups: Sequence[str] | None = None
) -> dict[str, Any] | None:
    """The explain request that decides `record`'s request again, or None (see the module
    docstring); `known_groups`: the principal's groups when the record has none. Never raises
    for any JSON object."""
    if record.get("event") != "decision":
        return None
    action, principal = record.get("action"), record.get("principal")
    kind, method = record.get("principal_kind"), record.get("auth_method")
    spec = OPERATIONS.get(action) if isinstance(action, str) else None
    if spec is None or spec.action is None or not isinstance(principal, str) or not principal:
        return None
    if kind not in _KINDS or method not in _METHODS or not isinstance(record.get("resource"), str):
        return None
    resource = explained_resource(record["resource"])
    if resource is None:
        return None
    body: dict[str, Any] = {"principal": principal, "kind": kind, "auth_method": method}
    groups = _groups(record)
    if groups is None and known_groups is not None:
        groups = list(known_groups)
    if groups is not None:
        body["groups"] = groups
    address = record.get("client_address")
    if isinstance(address, str) and 0 < len(address) <= _MAX_ADDRESS:
        body["client_address"] = address
    body["action"] = action
    body["resource"] = resource
    return body
