"""What an OIDC issuer may assert as groups: its groups claim read as the operator configured it,
then scoped to the issuer.

Public API::

    asserted_groups(claim, separator) -> frozenset[str]   raises GroupsClaimError
    scope = IssuerGroupScope.of(issuer_settings)
    scope.groups(asserted) -> frozenset[str]               what the principal is a member of

Rules (docs/threat-model.md, "An assertion is trusted only as far as its asserter"):

- A list claim holds one group per string. A string claim is ONE group unless the issuer sets
  `groups_separator`; then it is split on exactly that separator, never on other characters
  (no Unicode whitespace splitting: `ops<no-break space>admins` is one group). Empty names are
  dropped; any other claim type refuses the token.
- Every asserted group `g` becomes `<alias>/g` (`scoped_group`), which no other identity source
  can assert: issuer namespaces are prefix-free and a bare name containing `/` is never admitted.
- The bare name `g` is added only if the issuer's `groups_allowed` admits it (listed, or `*` for
  every name), it contains no `/`, and, if it is one of `PRIVILEGED_GROUPS`, the issuer also lists
  it in `privileged_groups_allowed` (an explicit opt-in; `*` never covers a privileged group).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cedarberg.gateway.authn.principal import GROUP_SCOPE_SEPARATOR, PRIVILEGED_GROUPS, scoped_group
from cedarberg.gateway.config.authn import ANY_GROUP, OidcIssuerSettings


class GroupsClaimError(ValueError):
    """The groups claim is neither a string nor a list of strings."""


def asserted_groups(claim: object, separator: str | None) -> frozenset[str]:
    """The group names a groups claim asserts (see the module docstring). Raises GroupsClaimError."""
    if claim is None:
        return frozenset()
    if isinstance(claim, str):
        names = claim.split(separator) if separator is not None else [claim]
        return frozenset(name for name in names if name)
    if isinstance(claim, list) and all(isinstance(name, str) for name in claim):
        return frozenset(name for name in claim if name)
    raise GroupsClaimError(f"groups claim has unexpected type {type(claim).__name__}")


@dataclass(frozen=True, slots=True)
class IssuerGroupScope:
    """One issuer's namespace and the bare group names it may assert."""

    namespace: str
    allowed: frozenset[str]
    allow_any: bool
    privileged: frozenset[str]

    @classmethod
    def of(cls, settings: OidcIssuerSettings) -> IssuerGroupScope:
        allowed = frozenset(settings.groups_allowed)
        return cls(
            namespace=settings.namespace,
            allowed=allowed - {ANY_GROUP},
            allow_any=ANY_GROUP in allowed,
            privileged=frozenset(settings.privileged_groups_allowed),
        )

    def admits_bare(self, group: str) -> bool:
        """Whether this issuer may assert `group` under its bare name."""
        if GROUP_SCOPE_SEPARATOR in group:
            return False
        if group in PRIVILEGED_GROUPS:
            return group in self.privileged
        return self.allow_any or group in self.allowed

    def groups(self, asserted: Iterable[str]) -> frozenset[str]:
        """The groups a principal is a member of when this issuer asserts `asserted`."""
        members: set[str] = set()
        for group in asserted:
            members.add(scoped_group(self.namespace, group))
            if self.admits_bare(group):
                members.add(group)
        return frozenset(members)
