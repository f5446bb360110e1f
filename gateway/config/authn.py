"""Settings of authentication: the gateway's own access tokens (`[tokens]`), trusted OIDC
issuers (`[oidc]`) and API key verification (`[api_keys]`), with the constants they are checked
against. `gateway.authn` uses them; nothing here imports it beyond `principal`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from cedarberg.gateway.authn.principal import GROUP_SCOPE_SEPARATOR, PRIVILEGED_GROUPS, PrincipalKind
from cedarberg.gateway.config.base import FrozenSettings

# Where the token signing key is created when `tokens.key_file` is unset (under data_dir).
DEFAULT_KEY_FILE = "token-signing-key.pem"
# Longest OIDC bearer token parsed (unless `oidc.max_token_bytes` says otherwise).
DEFAULT_MAX_TOKEN_BYTES = 16 * 1024
# Verified bearer JWTs remembered, and their estimated memory (`tokens.verified_cache_*`).
DEFAULT_VERIFIED_CACHE_SIZE = 10_000
DEFAULT_VERIFIED_CACHE_BYTES = 16 * 1024**2
# Memory the verified-API-key cache may hold, estimated (`api_keys.cache_max_bytes`).
DEFAULT_CACHE_BYTES = 16 * 1024**2
# The asymmetric JWS algorithms an OIDC issuer may be pinned to (`none` and HS* never are).
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
ASYMMETRIC_ALGORITHMS = RSA_ALGORITHMS | frozenset(EC_ALGORITHMS.values()) | {"EdDSA"}
# In `groups_allowed`: every bare group name an issuer asserts, except the privileged ones.
ANY_GROUP = "*"


def url_allowed(url: str, *, allow_http: bool) -> bool:
    """Whether `url` is https, or http to a loopback host, or http with `allow_http`."""
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in {"https", "http"}:
        return False
    if parts.scheme == "https" or allow_http:
        return True
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def keys_url_allowed(url: str, *, issuer: str, allow_http: bool) -> bool:
    """Whether an issuer's keys (discovery document, JWKS) may be fetched from `url`: as
    `url_allowed`, except that an https issuer's keys come over https only, whatever `allow_http`
    says (a loopback http URL would let whoever listens there on the gateway's host sign tokens)."""
    if urlsplit(issuer).scheme == "https":
        return urlsplit(url).scheme == "https" and bool(urlsplit(url).hostname)
    return url_allowed(url, allow_http=allow_http)


# An OIDC token whose `exp` is further ahead than this is refused (`max_token_lifetime_seconds`).
DEFAULT_MAX_OIDC_TOKEN_LIFETIME = 24 * 3600
MAX_OIDC_TOKEN_LIFETIME = 7 * 24 * 3600


class TokenSettings(FrozenSettings):
    """The gateway's own access tokens (issued at /v1/oauth/tokens)."""

    issuer: str = Field("cedarberg", min_length=1, description="`iss` of issued tokens.")
    audience: str = Field("cedarberg", min_length=1, description="`aud` of issued tokens.")
    ttl_seconds: int = Field(3600, ge=60, le=86_400, description="Lifetime of an issued token.")
    leeway_seconds: int = Field(30, ge=0, le=300, description="Clock skew tolerated on exp/nbf/iat.")
    key_file: Path | None = Field(
        None,
        description="PEM file with the Ed25519 private signing key. Unset: "
        f"<data_dir>/{DEFAULT_KEY_FILE}, created on first start with mode 0600.",
    )
    max_token_bytes: int = Field(
        4096, ge=512, le=65_536, description="Longer bearer tokens are refused unparsed."
    )
    verified_cache_size: int = Field(
        DEFAULT_VERIFIED_CACHE_SIZE,
        ge=0,
        le=1_000_000,
        description="Verified bearer JWTs (gateway-issued and OIDC) remembered, by SHA-256, until "
        "they expire, so a token's signature is checked once. 0: verify every request.",
    )
    verified_cache_max_bytes: int = Field(
        DEFAULT_VERIFIED_CACHE_BYTES,
        ge=0,
        le=4 * 1024**3,
        description="Estimated memory the verified-token cache may hold (the principals' ids, "
        "groups and attributes); least recently used tokens go first. 0: verify every request.",
    )


class DelegationSettings(FrozenSettings):
    """Engines acting for their users (RFC 8693 token exchange with an actor token).

    Who may act for whom is a Cedar decision (`actAs`); these settings bound what a subject token
    may be."""

    subject_max_age_seconds: int = Field(
        300,
        ge=10,
        le=3600,
        description="An unsigned subject token (Trino's `session=USER`) is refused as expired once "
        "its `iat` is older than this (plus `tokens.leeway_seconds`); it must carry `iat`.",
    )


class OidcIssuerSettings(FrozenSettings):
    """One trusted token issuer.

    `issuer` must equal the tokens' `iss` claim (and the discovery document's `issuer`) exactly.
    `audiences`: a token must name at least one of them in `aud` (a single string is accepted).
    `algorithms`: the only signature algorithms accepted from this issuer; asymmetric only.
    `discovery_url` defaults to `<issuer>/.well-known/openid-configuration`; `jwks_uri`, if set,
    skips discovery. `principal_claim`, `groups_claim` and the values of `attribute_claims` are claim
    names, or dotted paths into nested objects (`realm_access.roles`); a claim whose literal name
    contains dots is found first. Groups may be a list of strings or one string (one group, unless
    `groups_separator` is set); a missing groups claim means no groups. Each group `g` becomes
    `<alias>/g`, plus the bare `g` where `groups_allowed` / `privileged_groups_allowed` admit it
    (`gateway.authn.groups`). The principal id is
    `oidc:<alias>/<principal_prefix><subject>` (`alias` defaults to the issuer URL), so subjects of
    two issuers, and subjects equal to an API key's principal name, stay distinct principals.
    URLs must be https unless they point to loopback, or `unsafe_allow_http` is set; an https
    issuer's `discovery_url` and `jwks_uri` (configured or discovered) must be https in any case.
    """

    issuer: str = Field(min_length=1)
    audiences: tuple[str, ...] = Field(min_length=1)
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    discovery_url: str | None = None
    jwks_uri: str | None = None
    principal_claim: str = Field("sub", min_length=1)
    principal_prefix: str = ""
    alias: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Short name of the issuer in principal ids (`oidc:<alias>/<subject>`); "
        "unset: the issuer URL.",
    )
    principal_kind: PrincipalKind = PrincipalKind.USER
    groups_claim: str | None = "groups"
    # -- what this issuer may assert as groups (gateway.authn.groups) --
    groups_allowed: tuple[str, ...] = Field(
        (),
        description="Group names this issuer may assert bare (as `analysts`, matching API keys' "
        "groups and grants that name the bare group); `*`: every name. Every group the issuer "
        "asserts is also, always, `<alias>/<group>` (`<alias>`: the issuer's alias, else its URL), "
        "which policies and grants may name whatever this list says. Unset: only that scoped form. "
        "Privileged groups (`admins`, `audit-readers`, `monitoring`) are never admitted here, `*` "
        "included: see privileged_groups_allowed. One issuer keeping the behaviour of earlier "
        "versions: `['*']` here (or the list of its groups), the privileged groups it granted in "
        "privileged_groups_allowed, and groups_separator if its claim is a string.",
    )
    privileged_groups_allowed: tuple[str, ...] = Field(
        (),
        description="Privileged groups (those the bundled policies give special power: "
        f"{', '.join(sorted(PRIVILEGED_GROUPS))}) this issuer may assert bare, e.g. `['admins']` "
        "for the organisation's own identity provider. Unset: none; a token claiming `admins` "
        "makes its subject a member of `<alias>/admins` only.",
    )
    groups_separator: str | None = Field(
        None,
        min_length=1,
        max_length=8,
        description="When the groups claim is a string: split it on exactly this separator (e.g. "
        "one space, for a space-separated scope). Unset: a string claim is one group. A list claim is "
        "never split.",
    )
    attribute_claims: Mapping[str, str] = Field(default_factory=dict)
    leeway_seconds: int = Field(30, ge=0, le=300)
    unsafe_allow_http: bool = False

    # -- what a token of this issuer is trusted for (issue 27, section 8: tokens) --
    max_token_lifetime_seconds: int = Field(
        DEFAULT_MAX_OIDC_TOKEN_LIFETIME,
        ge=60,
        le=MAX_OIDC_TOKEN_LIFETIME,
        description="Longest lifetime accepted from this issuer: a token whose `exp` is further "
        "than this from now (beyond `leeway_seconds`), or from its `iat`, is refused, so a leaked "
        "long-lived token is not a standing credential. `exp` is required.",
    )

    @field_validator("audiences", mode="before")
    @classmethod
    def _one_audience_is_a_list(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("audiences")
    @classmethod
    def _no_empty_audience(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not all(value):
            raise ValueError("audiences must be non-empty strings")
        return value

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one algorithm is required")
        for alg in value:
            if alg.lower() == "none" or alg.upper().startswith("HS"):
                raise ValueError(f"algorithm {alg!r} is never accepted for OIDC tokens")
            if alg not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"unsupported algorithm {alg!r}; allowed: {sorted(ASYMMETRIC_ALGORITHMS)}")
        return tuple(dict.fromkeys(value))

    @field_validator("groups_allowed")
    @classmethod
    def _bare_groups_are_unprivileged(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for group in value:
            if not group or GROUP_SCOPE_SEPARATOR in group:
                raise ValueError(f"group {group!r} must be non-empty and without {GROUP_SCOPE_SEPARATOR!r}")
            if group in PRIVILEGED_GROUPS:
                raise ValueError(
                    f"group {group!r} is privileged: an issuer asserts it bare only through "
                    "privileged_groups_allowed"
                )
        return tuple(dict.fromkeys(value))

    @field_validator("privileged_groups_allowed")
    @classmethod
    def _only_privileged_groups(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for group in value:
            if group not in PRIVILEGED_GROUPS:
                raise ValueError(
                    f"group {group!r} is not privileged (those are {sorted(PRIVILEGED_GROUPS)}); "
                    "list it in groups_allowed"
                )
        return tuple(dict.fromkeys(value))

    @property
    def namespace(self) -> str:
        """What principal ids of this issuer's tokens start with, after `oidc:`."""
        return self.alias if self.alias is not None else self.issuer

    @model_validator(mode="after")
    def _urls_are_safe(self) -> Self:
        for name in ("issuer", "discovery_url", "jwks_uri"):
            url = getattr(self, name)
            if url is not None and not url_allowed(url, allow_http=self.unsafe_allow_http):
                raise ValueError(
                    f"{name} {url!r} must be an https URL (http only for loopback or with unsafe_allow_http)"
                )
            if url is not None and not keys_url_allowed(
                url, issuer=self.issuer, allow_http=self.unsafe_allow_http
            ):
                raise ValueError(f"{name} {url!r} must be https: the issuer {self.issuer!r} is https")
        return self


class OidcSettings(FrozenSettings):
    """All trusted OIDC issuers and the limits that protect the gateway from tokens and IdPs.

    `max_token_bytes`: longer bearer tokens are refused before parsing. `fetch_timeout_seconds` and
    `max_document_bytes` bound each discovery/JWKS download. Each issuer's keys are downloaded at
    most once per `refresh_min_interval_seconds` (whatever triggers it: first use, an unknown `kid`,
    expiry of `cache_ttl_seconds`), so a flood of unknown kids costs at most one download per
    interval.
    """

    issuers: tuple[OidcIssuerSettings, ...] = ()
    max_token_bytes: int = Field(DEFAULT_MAX_TOKEN_BYTES, ge=1024, le=1024 * 1024)
    fetch_timeout_seconds: float = Field(5.0, gt=0, le=60)
    max_document_bytes: int = Field(512 * 1024, ge=1024, le=16 * 1024 * 1024)
    refresh_min_interval_seconds: float = Field(30.0, gt=0, le=3600)
    cache_ttl_seconds: float = Field(3600.0, gt=0, le=7 * 24 * 3600)

    @field_validator("issuers")
    @classmethod
    def _issuers_unique(cls, value: tuple[OidcIssuerSettings, ...]) -> tuple[OidcIssuerSettings, ...]:
        names = [issuer.issuer for issuer in value]
        if len(names) != len(set(names)):
            raise ValueError("each issuer may be configured once")
        # `oidc:<namespace>/<subject>` must name one issuer: no namespace may equal another, or
        # start with another followed by `/` (issuer URLs have paths), or ids could collide.
        spaces = [issuer.namespace for issuer in value]
        for i, one in enumerate(spaces):
            for other in spaces[i + 1 :]:
                if one == other or one.startswith(other + "/") or other.startswith(one + "/"):
                    raise ValueError(
                        f"issuer namespaces {one!r} and {other!r} overlap in principal ids; "
                        "set distinct aliases"
                    )
        return value


class ApiKeySettings(FrozenSettings):
    """Limits of API key verification. Defaults suit a small deployment on a few cores."""

    hash_concurrency: int = Field(
        2, ge=1, le=64, description="Argon2id hashes run at once (each uses 64 MiB and one core)."
    )
    cache_size: int = Field(10_000, ge=0, le=1_000_000, description="Verified keys kept in memory.")
    cache_max_bytes: int = Field(
        DEFAULT_CACHE_BYTES,
        ge=0,
        le=4 * 1024**3,
        description="Estimated memory the verified-key cache may hold; least recently used keys "
        "go first. 0: verify every request.",
    )
    cache_ttl_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="How long a verified key is trusted without re-checking the store; also the "
        "longest a revocation or rotation in another gateway process takes to reach this one.",
    )
    change_poll_seconds: float = Field(
        1.0,
        ge=0.1,
        le=60,
        description="How often this process reads the key change feed (revocations and "
        "rotations made by any gateway process); the longest such a change takes to reach it.",
    )
    lockout_threshold: int = Field(
        5,
        ge=1,
        le=1000,
        description="Failed verifications of one key id from one client address that lock that "
        "address out of that key (the key keeps working from other addresses).",
    )
    failure_window_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="Window in which failures of one key id from one client address are counted.",
    )
    lockout_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="How long a locked-out (key id, client address) pair is refused without hashing.",
    )
    max_rotation_overlap_seconds: int = Field(
        86_400,
        ge=0,
        le=86_400,
        description="Longest overlap window a rotation may give a key's previous secret "
        "(`overlap_seconds` of POST /admin/v1/api-keys/{id}/rotate, `cedarberg admin keys rotate "
        "--overlap`): until it ends the previous secret, and gateway tokens it proved, keep "
        "working on every gateway process; then they stop. A rotation without an overlap ends the "
        "old secret at once. 0: no rotation may overlap. At most one day, so every token the "
        "previous secret proves ends while the key change feed still holds the rotation.",
    )
    lockout_tracked_ids: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="(Key id, client address) pairs whose failures are tracked at once.",
    )
