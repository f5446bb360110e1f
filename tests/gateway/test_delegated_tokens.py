"""Gateway tokens of delegated users: the `act` claim, and what `verify` refuses around it.

Only the gateway's key signs these tokens, so the checks on their shape are a second line; each
case below is signed with the gateway's own key, as a bug or a leaked intermediate would make it.
"""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.subject_token import DelegationFacts
from cedarberg.gateway.authn.tokens import TOKEN_TYPE, TokenIssuer
from cedarberg.gateway.config.authn import TokenSettings

FACTS = DelegationFacts("urn:ietf:params:oauth:token-type:jwt", "unsigned", trino_catalog="lake")
ALICE = Principal(
    "user:alice",
    PrincipalKind.USER,
    frozenset({"analysts"}),
    AuthMethod.GATEWAY_TOKEN,
    {"api_key_id": "k" * 16},
    key_generation=2,
    actor="key:trino",
)


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def issuer(key: Ed25519PrivateKey) -> TokenIssuer:
    return TokenIssuer(TokenSettings(), key)


def test_a_delegated_token_names_the_user_and_the_actor_and_keeps_the_facts(issuer: TokenIssuer) -> None:
    token, lifetime = issuer.issue(ALICE, 120, FACTS)
    assert lifetime == 120
    principal, facts = issuer.verify_delegation(token)
    assert principal == ALICE
    assert facts == FACTS
    assert jwt.decode(token, options={"verify_signature": False})["act"] == {"sub": "key:trino"}


def test_a_lifetime_longer_than_the_ttl_is_cut_to_it(issuer: TokenIssuer) -> None:
    _token, lifetime = issuer.issue(ALICE, 10**6, FACTS)
    assert lifetime == TokenSettings().ttl_seconds


def test_a_delegated_principal_is_never_issued_without_its_facts(issuer: TokenIssuer) -> None:
    with pytest.raises(ValueError, match="delegation facts"):
        issuer.issue(ALICE)


def _signed(issuer: TokenIssuer, key: Ed25519PrivateKey, **overrides: Any) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": "cedarberg",
        "aud": "cedarberg",
        "sub": "user:alice",
        "iat": now,
        "nbf": now,
        "exp": now + 60,
        "kind": "user",
        "groups": ["analysts"],
        "attrs": {"api_key_id": "k" * 16},
        "kgen": 2,
        "act": {"sub": "key:trino"},
        "dlg": FACTS.to_claim(),
    }
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": issuer.kid, "typ": TOKEN_TYPE})


def test_the_control_token_verifies(issuer: TokenIssuer, key: Ed25519PrivateKey) -> None:
    assert issuer.verify(_signed(issuer, key)).actor == "key:trino"


@pytest.mark.parametrize(
    "overrides",
    [
        {"act": None},  # a user's id without an actor
        {"act": None, "dlg": None},
        {"dlg": None},  # an actor without the decision's facts
        {"sub": "key:root"},  # a delegated token naming a key's principal
        {"sub": "anonymous:x"},
        {"act": {"sub": "oidc:corp/bot"}},  # an actor that is not a key's principal
        {"act": {"sub": "key:trino", "act": {"sub": "key:other"}}},  # a chain
        {"act": "key:trino"},
        {"attrs": {}},  # not bound to the actor's key
        {"kgen": None},
        {"dlg": {"typ": 1, "iss": "unsigned"}},
    ],
)
def test_malformed_delegations_are_refused(
    issuer: TokenIssuer, key: Ed25519PrivateKey, overrides: dict[str, Any]
) -> None:
    with pytest.raises(AuthenticationError):
        issuer.verify(_signed(issuer, key, **overrides))
