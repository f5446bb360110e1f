"""The Cedar request context: who asked how and from where, and what a mutation does.

One shape for every action (`RequestContext` in the schema); the change fields are empty (and
`creates` false) where they do not apply, so a policy never needs `has` for them. Only
`tls_subject` and `via` (the engine acting for a delegated principal) are optional.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.authn.principal import Principal

if TYPE_CHECKING:  # `catalog.effects` compares pyiceberg metadata; the context only reads an Effect
    from cedarberg.catalog.effects import Effect

JsonDict = dict[str, Any]


# Bounds on what a decision's context may hold: the context is part of the decision cache key,
# and a change that touches more than this is refused (400) rather than summarised (a summary
# that dropped an entry could hide it from a policy).
MAX_CONTEXT_ITEMS = 512
MAX_CONTEXT_CHARS = 512


def _bounded(what: str, values: Iterable[str]) -> frozenset[str]:
    items = frozenset(values)
    if len(items) > MAX_CONTEXT_ITEMS:
        raise InvalidRequestError(
            f"the change touches too many {what} to authorize (at most {MAX_CONTEXT_ITEMS})"
        )
    if any(len(item) > MAX_CONTEXT_CHARS for item in items):
        raise InvalidRequestError(f"{what} longer than {MAX_CONTEXT_CHARS} characters cannot be authorized")
    return items


@dataclass(frozen=True, slots=True)
class ChangeSummary:
    """What a mutation does, as policies see it (`context.update_kinds`, `refs`, ...).

    For commits, renames, creates and registrations it is derived from the planned change
    (`catalog.effects.Effect`): the difference between the metadata before and after, never the
    wording of the request. For namespace properties it names the keys of the parsed request.
    """

    update_kinds: frozenset[str] = frozenset()
    refs: frozenset[str] = frozenset()
    property_keys: frozenset[str] = frozenset()
    creates: bool = False

    @classmethod
    def of_effect(cls, effect: Effect) -> ChangeSummary:
        """The summary of a planned change. Raises InvalidRequestError past the context bounds."""
        return cls(
            update_kinds=effect.update_kinds,
            refs=_bounded("refs", effect.refs),
            property_keys=_bounded("property keys", effect.property_keys),
            creates=effect.creates,
        )

    @classmethod
    def of_properties(cls, updates: Iterable[str] = (), removals: Iterable[str] = ()) -> ChangeSummary:
        """Summarise a request that sets or removes namespace properties (create, update)."""
        set_keys, removed = frozenset(updates), frozenset(removals)
        kinds = {"set-properties"} if set_keys else set()
        if removed:
            kinds.add("remove-properties")
        return cls(update_kinds=frozenset(kinds), property_keys=_bounded("property keys", set_keys | removed))


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The Cedar `context` of a request (see `RequestContext` in the schema)."""

    auth_method: str
    client_address: str
    tls_subject: str | None = None
    changes: ChangeSummary = ChangeSummary()
    via: str | None = None  # the actor's principal id when an engine acts for the principal

    @classmethod
    def of(
        cls, principal: Principal, client_address: str, changes: ChangeSummary | None = None
    ) -> RequestContext:
        """The context for `principal`; its `tls_subject` attribute, if any, becomes `tls_subject`,
        and its `actor`, if any, `via`."""
        return cls(
            auth_method=principal.auth_method.value,
            client_address=client_address,
            tls_subject=principal.attributes.get("tls_subject"),
            changes=changes or ChangeSummary(),
            via=principal.actor,
        )

    def with_changes(self, changes: ChangeSummary) -> RequestContext:
        return RequestContext(self.auth_method, self.client_address, self.tls_subject, changes, self.via)

    def to_cedar(self) -> JsonDict:
        out: JsonDict = {
            "auth_method": self.auth_method,
            "client_address": self.client_address,
            "update_kinds": sorted(self.changes.update_kinds),
            "refs": sorted(self.changes.refs),
            "property_keys": sorted(self.changes.property_keys),
            "creates": self.changes.creates,
        }
        if self.tls_subject is not None:
            out["tls_subject"] = self.tls_subject
        if self.via is not None:
            out["via"] = self.via
        return out
