"""The Cedar request context: who asked how and from where, and what a mutation touches.

One shape for every action (`RequestContext` in the schema); the commit fields are empty sets where
they do not apply, so a policy never needs `has` for them. Only `tls_subject` is optional.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.authn.principal import Principal

JsonDict = dict[str, Any]


def _strings(values: Iterable[object]) -> frozenset[str]:
    return frozenset(v for v in values if isinstance(v, str))


@dataclass(frozen=True, slots=True)
class ChangeSummary:
    """What a mutation touches, as policies see it (`context.update_kinds`, `refs`, ...)."""

    update_kinds: frozenset[str] = frozenset()
    refs: frozenset[str] = frozenset()
    property_keys: frozenset[str] = frozenset()
    requirements: frozenset[str] = frozenset()

    @classmethod
    def of_commit(
        cls, updates: Iterable[Mapping[str, Any]], requirements: Iterable[Mapping[str, Any]] = ()
    ) -> ChangeSummary:
        """Summarise a table or view commit given as JSON objects (the REST wire form).

        Update kinds are the `action` fields; refs are the `ref-name`s of ref updates; property keys
        are those set or removed. Malformed entries are skipped: the catalog rejects them later.
        """
        kinds: set[str] = set()
        refs: set[str] = set()
        keys: set[str] = set()
        for update in updates:
            if not isinstance(update, Mapping):
                continue
            kind = update.get("action")
            if not isinstance(kind, str):
                continue
            kinds.add(kind)
            if kind in ("set-snapshot-ref", "remove-snapshot-ref"):
                refs |= _strings([update.get("ref-name")])
            elif kind == "set-properties" and isinstance(update.get("updates"), Mapping):
                keys |= _strings(update["updates"])
            elif kind == "remove-properties" and isinstance(update.get("removals"), list):
                keys |= _strings(update["removals"])
        types = _strings(r.get("type") for r in requirements if isinstance(r, Mapping))
        return cls(frozenset(kinds), frozenset(refs), frozenset(keys), types)

    @classmethod
    def of_properties(cls, updates: Iterable[str] = (), removals: Iterable[str] = ()) -> ChangeSummary:
        """Summarise a request that sets or removes properties (namespace properties, create)."""
        return cls(property_keys=_strings(updates) | _strings(removals))

    @property
    def creates(self) -> bool:
        """A commit that creates its table (a staged create's `assert-create` requirement)."""
        return "assert-create" in self.requirements


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The Cedar `context` of a request (see `RequestContext` in the schema)."""

    auth_method: str
    client_address: str
    tls_subject: str | None = None
    changes: ChangeSummary = ChangeSummary()

    @classmethod
    def of(
        cls, principal: Principal, client_address: str, changes: ChangeSummary | None = None
    ) -> RequestContext:
        """The context for `principal`; its `tls_subject` attribute, if any, becomes `tls_subject`."""
        return cls(
            auth_method=principal.auth_method.value,
            client_address=client_address,
            tls_subject=principal.attributes.get("tls_subject"),
            changes=changes or ChangeSummary(),
        )

    def with_changes(self, changes: ChangeSummary) -> RequestContext:
        return RequestContext(self.auth_method, self.client_address, self.tls_subject, changes)

    def to_cedar(self) -> JsonDict:
        out: JsonDict = {
            "auth_method": self.auth_method,
            "client_address": self.client_address,
            "update_kinds": sorted(self.changes.update_kinds),
            "refs": sorted(self.changes.refs),
            "property_keys": sorted(self.changes.property_keys),
            "requirements": sorted(self.changes.requirements),
        }
        if self.tls_subject is not None:
            out["tls_subject"] = self.tls_subject
        return out
