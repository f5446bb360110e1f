"""The one identity type every authenticator produces and every policy decision consumes.

Principal ids are namespaced by how the caller authenticated, so ids of different methods never
collide (an OIDC `sub` equal to an API key's principal name is another principal):

- `key:<principal>` — an API key's principal, presented directly or through a gateway token
  (gateway tokens are issued only for API keys and inherit their namespace);
- `oidc:<alias>/<subject>` — a token from a configured OIDC issuer; `<alias>` is the issuer's
  `alias` setting, else its `issuer` URL, and `<subject>` its principal claim (after the issuer's
  `principal_prefix`). Issuer namespaces are validated to be distinct and prefix-free;
- `anonymous:<name>` — the configured anonymous principal;
- `user:<name>` — a user an engine acts for (delegation, `gateway.authn.delegation`): named by an
  unsigned subject token that only an allowed actor may present, and known only if the gateway's
  directory lists it. A user proved by a signed OIDC subject keeps its `oidc:` id instead. Either
  way the principal carries its `actor` (the engine's id), which policies see as `context.via`.

Policies name one principal by its namespaced id (`Cedarberg::User::"key:alice"`); plan
ownership, audit records, idempotency records and rate-limit budgets all use the namespaced id.

Groups are scoped to whoever asserts them, in the same way: the gateway's own directory (API keys,
their gateway tokens, the anonymous principal, all set by the operator or an admin) asserts bare
names (`analysts`); a group an OIDC issuer asserts is `<alias>/<group>` (`scoped_group`), and the
bare name only where that issuer's allow-list admits it (`gateway.authn.groups`).
`PRIVILEGED_GROUPS` are the groups the bundled policies give special power.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from cedarberg.gateway.authn.credential import Proof
from cedarberg.gateway.byte_lru import estimate

KEY_NAMESPACE = "key:"
OIDC_NAMESPACE = "oidc:"
ANONYMOUS_NAMESPACE = "anonymous:"
DELEGATED_NAMESPACE = "user:"
# The groups the bundled policies (policies/*.cedar) give special power: `admins` may do
# everything and is exempt from the guards, `monitoring` reads /metrics, `audit-readers` read the
# audit log. No OIDC issuer asserts them bare unless the operator opts in
# (`privileged_groups_allowed`); a test checks this set against the bundled policies.
PRIVILEGED_GROUPS = frozenset({"admins", "audit-readers", "monitoring"})
# Between an issuer's namespace and a group it asserts: `corp/analysts`. A bare name containing it
# is never admitted from an issuer, so no issuer can spell another's scoped group.
GROUP_SCOPE_SEPARATOR = "/"


def key_principal_id(name: str) -> str:
    """The id of the principal an API key (or a gateway token issued for it) authenticates as."""
    return KEY_NAMESPACE + name


def oidc_principal_id(issuer_namespace: str, subject: str) -> str:
    """The id of an OIDC token's subject; `issuer_namespace` is the issuer's alias or URL."""
    return f"{OIDC_NAMESPACE}{issuer_namespace}/{subject}"


def scoped_group(issuer_namespace: str, group: str) -> str:
    """The name of `group` as asserted by the OIDC issuer whose alias (or URL) is `issuer_namespace`."""
    return f"{issuer_namespace}{GROUP_SCOPE_SEPARATOR}{group}"


def anonymous_principal_id(name: str) -> str:
    """The id of the configured anonymous principal."""
    return ANONYMOUS_NAMESPACE + name


def delegated_principal_id(name: str) -> str:
    """The id of a directory user an engine acts for (named by an unsigned subject token)."""
    return DELEGATED_NAMESPACE + name


class AuthMethod(StrEnum):
    """How a principal proved its identity (policies may require a particular one)."""

    JWT = "jwt"  # a token from a configured OIDC issuer
    GATEWAY_TOKEN = "gateway-token"  # noqa: S105 - a method name: a token the gateway issued
    API_KEY = "api-key"  # an API key presented directly
    MTLS = "mtls"  # a verified client certificate alone
    ANONYMOUS = "anonymous"  # only when explicitly configured


class PrincipalKind(StrEnum):
    USER = "user"
    SERVICE = "service"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    `id` is namespaced by the authentication method (see the module docstring) and unique within
    its kind; `groups` drive the default policies; `attributes` carry extra
    claims a policy may use (e.g. the verified client-certificate subject under `tls_subject`).
    `key_generation` is the generation of the API key (`attributes["api_key_id"]`) that proved the
    principal, directly or through a gateway token; None for other methods. A gateway token of an
    older generation than its key's current one was issued before a rotation or revocation and
    is refused.
    `actor` is the id of the engine acting for this principal (delegation), else None; the
    key that proved a delegated principal (`api_key_id`, `key_generation`) is the actor's, so
    rotating or revoking the actor's key ends the delegated tokens too.
    `key_secret_until` is when the key secret that proved the principal stops working (epoch
    seconds): set only for a key's previous secret during a rotation's overlap window, so that
    a gateway token it proves lives no longer. It takes no part in equality or in what policies see.
    `proof` is what a remembered verification of the principal's credential stays valid on: for
    an OIDC token its signing key's lease and any client-certificate binding, for an API key the
    lease of its entry in the verified-key cache (`gateway.authn.credential`); remembered
    verifications and request plans check it on every use. It takes no part in equality or in
    what policies see.
    `valid_until` is when the credential that proved the principal stops being good (epoch
    seconds: a token's `exp`, an API key's expiry or the end of its previous secret's overlap),
    None when it does not expire; set by `gateway.authn.bearer`. It takes no part in equality or
    in what policies see.
    """

    id: str
    kind: PrincipalKind
    groups: frozenset[str]
    auth_method: AuthMethod
    attributes: Mapping[str, str] = field(default_factory=dict)
    key_generation: int | None = None
    actor: str | None = None
    key_secret_until: float | None = field(default=None, compare=False, repr=False)
    proof: Proof | None = field(default=None, compare=False, repr=False)
    valid_until: float | None = field(default=None, compare=False, repr=False)


def principal_bytes(principal: Principal) -> int:
    """Estimated memory a principal holds (its id, groups and attributes), for bounded caches."""
    return 200 + estimate(principal.id, principal.groups, principal.attributes, principal.actor)
