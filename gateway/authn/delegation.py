"""An engine acting for its user: the delegation grant of the token endpoint (RFC 8693).

Public API::

    delegation = Delegation(settings, issuer, UserSources(authenticate_actor, keys, directory, oidc), judge)
    await delegation.exchange(form, client, peer, tls_subject)   # TokenResponse | OAuthError
    await delegation.refresh(user, facts, client, tls_subject)   # a delegated token, exchanged again

With `iceberg.rest-catalog.session=USER`, Trino's Iceberg client exchanges, once per user
session, `subject_token` (the user: an unsigned JWT Trino builds, or a signed OIDC `id_token` /
`access_token` from the user's extra credentials) with `actor_token` (Trino's own catalog token)
for a token naming the user. Rules, in order (each refusal is an OAuth2 error the client shows,
and is audited through the `DelegationJudge`):

1. The actor must authenticate: `actor_token` of type `access_token` is a gateway token or an API
   key (`authenticate_actor`: key cut-offs apply) naming an API key's principal, itself acting for
   nobody. A missing actor is `invalid_request`; one that does not authenticate is
   `invalid_request` counted as a failed authentication. With mTLS, the connection's verified
   certificate subject becomes the actor's `tls_subject`.
2. The subject must be valid: an unsigned JWT by `gateway.authn.subject_token`'s rules (bounded
   age, no signature, a valid name), or a token a configured OIDC issuer signed, verified exactly as
   a bearer token of that issuer (signature, `exp`, audience, certificate binding: a bound token
   cannot be exchanged by an engine that does not hold its certificate). Else `invalid_request`.
3. Who the user is: an unsigned subject names `user:<name>`, which must be listed in the gateway's
   directory; its groups are the directory's. A signed subject is the OIDC principal (`oidc:...`)
   with the issuer's scoped groups. The actor's word adds no group.
4. Cedar decides `actAs` (principal: the actor; resource: the user; context: the subject's type,
   issuer and claims, the actor's `tls_subject`). Not allowed, or a user outside the directory: the
   same `unauthorized_client` answer, so an actor learns nothing of the directory it may not use.
5. The issued token names the user with the actor in `act`, stays valid on the actor's key
   (rotation or revocation of that key ends it) and lives no longer than the actor's token, a
   signed subject's `exp` or `tokens.ttl_seconds`.

Refresh: the client exchanges the delegated token itself (no actor). The actor's key must still
be active at the token's generation, the user still listed (groups read again), and `actAs` is
decided again with the refresh request's `tls_subject`; a signed subject's `exp` still bounds it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from cedarberg.gateway.authn.credential import PeerCertificate
from cedarberg.gateway.authn.directory import UserDirectory
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.oauth import (
    ACCESS_TOKEN_TYPE,
    INVALID_SUBJECT,
    KeyVerifier,
    OAuthError,
    TokenResponse,
)
from cedarberg.gateway.authn.principal import (
    DELEGATED_NAMESPACE,
    KEY_NAMESPACE,
    AuthMethod,
    Principal,
    PrincipalKind,
    delegated_principal_id,
)
from cedarberg.gateway.authn.subject_token import (
    ID_TOKEN_TYPE,
    JWT_TOKEN_TYPE,
    DelegationFacts,
    SubjectTokenError,
    is_unsigned,
    read_unsigned_subject,
)
from cedarberg.gateway.authn.token_cache import validity
from cedarberg.gateway.authn.tokens import TokenIssuer
from cedarberg.gateway.config.authn import DelegationSettings

log = logging.getLogger("cedarberg.authn.delegation")

# The subject token types a user may be exchanged from; Iceberg's client prefers them in this
# order among a session's credentials.
SUBJECT_TOKEN_TYPES = frozenset({ID_TOKEN_TYPE, ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE})
NOT_ALLOWED = "the actor may not act for this user"


def _not_allowed() -> OAuthError:
    return OAuthError("unauthorized_client", NOT_ALLOWED, 400)


class DelegationJudge(Protocol):
    """Decides `actAs` and audits every delegation outcome (`gateway.web.delegation_judge`)."""

    def decide(
        self, actor: Principal, user: Principal, facts: DelegationFacts, client: str, refresh: bool
    ) -> bool: ...

    def refuse(self, actor: Principal | None, user: str | None, reason: str, client: str) -> None: ...


class SignedSubjects(Protocol):
    """What the exchange needs of the OIDC authenticator."""

    def handles(self, token: str) -> bool: ...

    async def authenticate(self, token: str, peer: PeerCertificate) -> Principal: ...


# (actor token, client address, peer certificate) -> the actor (`BearerAuthenticator.authenticate`).
ActorAuthenticator = Callable[[str, str, PeerCertificate], Awaitable[Principal]]
Issue = Callable[[Principal, int | None, DelegationFacts | None], Awaitable[TokenResponse | OAuthError]]


def _remaining(token: str) -> int | None:
    """Seconds a verified JWT still lives, None if it is not a JWT with an `exp`."""
    bounds = validity(token)
    return None if bounds is None else int(bounds[1] - time.time())


def _with_tls(principal: Principal, tls_subject: str | None) -> Principal:
    if tls_subject is None:
        return principal
    return dataclasses.replace(principal, attributes={**principal.attributes, "tls_subject": tls_subject})


@dataclass(frozen=True, slots=True)
class UserSources:
    """Where the exchange learns who is asking and who for: the actor's credential
    (`authenticate_actor`), the actor's key in the store (`keys`, for refreshes), the directory
    and the OIDC issuers (`subjects`)."""

    authenticate_actor: ActorAuthenticator
    keys: KeyVerifier
    directory: UserDirectory
    subjects: SignedSubjects


class Delegation:
    """The delegation grant (see the module docstring)."""

    def __init__(
        self, settings: DelegationSettings, issuer: TokenIssuer, sources: UserSources, judge: DelegationJudge
    ) -> None:
        self._settings = settings
        self._issuer = issuer
        self._directory = sources.directory
        self._subjects = sources.subjects
        self._authenticate_actor = sources.authenticate_actor
        self._keys = sources.keys
        self._judge = judge

    async def exchange(
        self,
        form: Mapping[str, str],
        client: str,
        peer: PeerCertificate,
        tls_subject: str | None,
        issue: Issue,
    ) -> TokenResponse | OAuthError:
        """Exchange a subject token presented with an actor token (see the module docstring)."""
        subject_token, subject_type = form.get("subject_token"), form.get("subject_token_type")
        actor_token = form.get("actor_token")
        if not subject_token or subject_type not in SUBJECT_TOKEN_TYPES:
            return OAuthError("invalid_request", "subject_token of a supported type is required", 400)
        if not actor_token:
            self._judge.refuse(None, None, "no actor_token with the subject", client)
            return OAuthError("invalid_request", "actor_token is required to act for a user", 400)
        if form.get("actor_token_type") != ACCESS_TOKEN_TYPE:
            return OAuthError("invalid_request", "actor_token_type must be access_token", 400)
        actor = await self._actor(actor_token, peer, tls_subject, client)
        if isinstance(actor, OAuthError):
            return actor
        user = await self._user(subject_token, subject_type, actor, client)
        if isinstance(user, OAuthError):
            return user
        principal, facts = user
        if not self._judge.decide(actor, principal, facts, client, False):
            return _not_allowed()
        bounds = [b for b in (_remaining(actor_token), _until(facts.subject_expires_at)) if b is not None]
        return await issue(principal, min(bounds) if bounds else None, facts)

    async def refresh(
        self,
        user: Principal,
        facts: DelegationFacts,
        client: str,
        tls_subject: str | None,
        issue: Issue,
    ) -> TokenResponse | OAuthError:
        """A fresh token for a delegated one (see the module docstring)."""
        key_id = user.attributes.get("api_key_id")
        if key_id is None or user.actor is None:
            return INVALID_SUBJECT
        try:
            actor = await self._keys.active_principal(key_id, user.key_generation or 0)
        except AuthenticationError:
            self._judge.refuse(None, user.id, "the actor's key was rotated or revoked", client)
            return INVALID_SUBJECT
        if actor.id != user.actor:
            return INVALID_SUBJECT
        actor = _with_tls(dataclasses.replace(actor, auth_method=AuthMethod.GATEWAY_TOKEN), tls_subject)
        if user.id.startswith(DELEGATED_NAMESPACE):
            listed = await self._listed(user.id.removeprefix(DELEGATED_NAMESPACE), actor)
            if listed is None:
                self._judge.refuse(actor, user.id, "the user is no longer in the directory", client)
                return _not_allowed()
            user = dataclasses.replace(user, groups=listed.groups)
        lifetime = _until(facts.subject_expires_at)
        if lifetime is not None and lifetime <= 0:
            self._judge.refuse(actor, user.id, "the signed subject has expired", client)
            return INVALID_SUBJECT
        if not self._judge.decide(actor, user, facts, client, True):
            return _not_allowed()
        return await issue(user, lifetime, facts)

    async def _actor(
        self, actor_token: str, peer: PeerCertificate, tls_subject: str | None, client: str
    ) -> Principal | OAuthError:
        try:
            actor = await self._authenticate_actor(actor_token, client, peer)
        except AuthenticationError:
            self._judge.refuse(None, None, "actor_token does not authenticate", client)
            return OAuthError("invalid_request", "actor_token is not valid", 400, auth_failure=True)
        is_engine_key = actor.id.startswith(KEY_NAMESPACE) and "api_key_id" in actor.attributes
        if not is_engine_key or actor.actor is not None:
            # Only an engine's own key may act for others; a delegated user may not delegate on.
            self._judge.refuse(actor, None, "the actor is not an API key's principal", client)
            return _not_allowed()
        return _with_tls(actor, tls_subject)

    async def _user(
        self, token: str, token_type: str, actor: Principal, client: str
    ) -> tuple[Principal, DelegationFacts] | OAuthError:
        if token_type == JWT_TOKEN_TYPE and is_unsigned(token):
            try:
                subject = read_unsigned_subject(
                    token,
                    token_type,
                    self._issuer.settings.max_token_bytes,
                    self._settings.subject_max_age_seconds,
                    self._issuer.settings.leeway_seconds,
                )
            except SubjectTokenError as err:
                self._judge.refuse(actor, None, str(err), client)
                return OAuthError("invalid_request", str(err), 400)
            listed = await self._listed(subject.name, actor)
            user_id = delegated_principal_id(subject.name)
            if listed is None:
                self._judge.refuse(actor, user_id, "the user is not in the directory", client)
                return _not_allowed()
            return listed, subject.facts
        if not self._subjects.handles(token):
            self._judge.refuse(actor, None, "subject_token is neither unsigned nor from an issuer", client)
            return OAuthError("invalid_request", "subject_token is not from a trusted issuer", 400)
        try:
            # No certificate: a subject bound to one is the user's, not the engine's to present.
            signed = await self._subjects.authenticate(token, _no_certificate)
        except AuthenticationError:
            self._judge.refuse(actor, None, "the signed subject_token does not verify", client)
            return OAuthError("invalid_request", "subject_token is not valid", 400)
        bounds = validity(token)
        facts = DelegationFacts(
            token_type,
            signed.attributes.get("issuer", ""),
            subject_expires_at=None if bounds is None else int(bounds[1]),
        )
        user = dataclasses.replace(
            signed,
            auth_method=AuthMethod.GATEWAY_TOKEN,
            attributes={**signed.attributes, "api_key_id": actor.attributes["api_key_id"]},
            key_generation=actor.key_generation,
            key_secret_until=actor.key_secret_until,
            actor=actor.id,
            proof=None,
        )
        return user, facts

    async def _listed(self, name: str, actor: Principal) -> Principal | None:
        """The directory user `name` acted for by `actor`, or None if it is not listed."""
        record = await self._directory.get(name)
        if record is None:
            return None
        return Principal(
            id=delegated_principal_id(name),
            kind=PrincipalKind.USER,
            groups=frozenset(record.groups),
            auth_method=AuthMethod.GATEWAY_TOKEN,
            attributes={"api_key_id": actor.attributes["api_key_id"]},
            key_generation=actor.key_generation,
            key_secret_until=actor.key_secret_until,
            actor=actor.id,
        )


def _no_certificate() -> bytes | None:
    return None


def _until(epoch: int | None) -> int | None:
    return None if epoch is None else int(epoch - time.time())
