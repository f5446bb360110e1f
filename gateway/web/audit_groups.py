"""The groups an audited principal has now, where the gateway itself knows them: what the explain
body of an audit record (`gateway.audit_explain`) names when the record does not carry them.

    groups = await KnownGroups.of(request).find(records)   # principal id -> (groups, source)

Sources, as the access review uses them (`gateway.web.review_sources`): a `key:` principal's
active API keys (when they all agree; `api-key`), a `user:` principal's entry in the user
directory (`directory`), the configured anonymous principal (`anonymous`). An OIDC subject's
groups came with its token and are known nowhere else: none. At most `MAX_LOOKUPS` principals
are looked up per answer (the others get none), so one page costs a bounded number of queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from aiohttp import web

from cedarberg.gateway.authn.principal import DELEGATED_NAMESPACE, KEY_NAMESPACE
from cedarberg.gateway.web.keys import security
from cedarberg.gateway.web.review_sources import active_keys

__all__ = ["MAX_LOOKUPS", "find_groups"]

MAX_LOOKUPS: Final = 32

Found = dict[str, tuple[list[str], str]]


def _wanted(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Principals of decision records that do not state their groups, in order, once each."""
    wanted: dict[str, None] = {}
    for record in records:
        principal = record.get("principal")
        if record.get("event") == "decision" and "groups" not in record and isinstance(principal, str):
            wanted.setdefault(principal)
    return list(wanted)


async def find_groups(request: web.Request, records: Iterable[Mapping[str, Any]]) -> Found:
    """Principal id -> (its groups now, where they come from), for the principals of `records`
    the gateway knows. Raises StorageUnavailableError (the key store or directory)."""
    guard = security(request)
    found: Found = {}
    for principal in _wanted(records)[:MAX_LOOKUPS]:
        if principal.startswith(KEY_NAMESPACE):
            keys, _ = await active_keys(guard.api_keys, principal.removeprefix(KEY_NAMESPACE))
            shapes = {tuple(sorted(record.groups)) for record in keys}
            if len(shapes) == 1:
                found[principal] = (list(shapes.pop()), "api-key")
        elif principal.startswith(DELEGATED_NAMESPACE):
            user = await guard.directory.get(principal.removeprefix(DELEGATED_NAMESPACE))
            if user is not None:
                found[principal] = (list(user.groups), "directory")
        elif guard.anonymous is not None and principal == guard.anonymous.id:
            found[principal] = (sorted(guard.anonymous.groups), "anonymous")
    return found
