"""Gateway-issued access tokens (Ed25519 JWTs) and the OAuth2 token endpoint logic.

Forged tokens are built with the real signing key read from the key file, or by hand where PyJWT
refuses to produce them (alg `none`, HS256 keyed with the public key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.errors import GENERIC_MESSAGE, AuthenticationError, CredentialExpiredError
from cedarberg.gateway.authn.key_format import new_key_id, new_secret, parse_api_key
from cedarberg.gateway.authn.key_store import KeyStore, open_key_store
from cedarberg.gateway.authn.oauth import ACCESS_TOKEN_TYPE, OAuthError, TokenEndpoint, TokenResponse
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.tokens import TokenIssuer, TokenKeyError
from cedarberg.gateway.config.authn import DEFAULT_KEY_FILE, ApiKeySettings, TokenSettings

ALICE = Principal(
    id="key:alice",
    kind=PrincipalKind.USER,
    groups=frozenset({"readers", "writers"}),
    auth_method=AuthMethod.API_KEY,
    attributes={"api_key_id": "abcdefghijklmnop"},
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64json(value: dict[str, Any]) -> str:
    return _b64(json.dumps(value, separators=(",", ":")).encode())


@pytest.fixture
def issuer(tmp_path: Path) -> TokenIssuer:
    return TokenIssuer.open(TokenSettings(), tmp_path)


def _private_key(tmp_path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key((tmp_path / DEFAULT_KEY_FILE).read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def _claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": "cedarberg",
        "aud": "cedarberg",
        "sub": "key:alice",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "kind": "user",
        "groups": ["readers"],
        "attrs": {},
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def _sign(tmp_path: Path, issuer: TokenIssuer, claims: dict[str, Any], **headers: Any) -> str:
    header = {"kid": issuer.kid, "typ": "at+jwt", **headers}
    return jwt.encode(claims, _private_key(tmp_path), algorithm="EdDSA", headers=header)


def _rejected(issuer: TokenIssuer, token: str) -> AuthenticationError:
    with pytest.raises(AuthenticationError) as caught:
        issuer.verify(token)
    assert str(caught.value) == GENERIC_MESSAGE
    return caught.value


# -- issue / verify ----------------------------------------------------------------------------


def test_issue_verify_round_trip(issuer: TokenIssuer) -> None:
    token, expires_in = issuer.issue(ALICE)
    assert expires_in == 3600
    principal = issuer.verify(token)
    assert principal.id == "key:alice"
    assert principal.kind is PrincipalKind.USER
    assert principal.groups == ALICE.groups
    assert principal.attributes == {"api_key_id": "abcdefghijklmnop"}
    assert principal.auth_method is AuthMethod.GATEWAY_TOKEN
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "EdDSA", "kid": issuer.kid, "typ": "at+jwt"}
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600
    assert issuer.issue(ALICE)[0] != token  # unique jti


def test_jwks_verifies_a_token_independently(issuer: TokenIssuer) -> None:
    token, _ = issuer.issue(ALICE)
    jwks = json.loads(json.dumps(issuer.jwks()))
    assert len(jwks["keys"]) == 1
    jwk = jwks["keys"][0]
    assert set(jwk) == {"kty", "crv", "x", "kid", "alg", "use"}
    assert "d" not in jwk
    # kid is the RFC 7638 thumbprint, computed here from scratch.
    canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]}, separators=(",", ":"))
    assert jwk["kid"] == _b64(hashlib.sha256(canonical.encode()).digest())
    key = jwt.PyJWKSet.from_dict(jwks)[jwt.get_unverified_header(token)["kid"]]
    claims = jwt.decode(token, key.key, algorithms=["EdDSA"], audience="cedarberg", issuer="cedarberg")
    assert claims["sub"] == "key:alice"


def test_expired_token_raises_the_expired_error(tmp_path: Path, issuer: TokenIssuer) -> None:
    now = int(time.time())
    expired = _sign(tmp_path, issuer, _claims(iat=now - 700, nbf=now - 700, exp=now - 60))
    with pytest.raises(CredentialExpiredError):
        issuer.verify(expired)
    within_leeway = _sign(tmp_path, issuer, _claims(iat=now - 700, nbf=now - 700, exp=now - 10))
    assert issuer.verify(within_leeway).id == "key:alice"


def test_not_yet_valid_token(tmp_path: Path, issuer: TokenIssuer) -> None:
    now = int(time.time())
    error = _rejected(issuer, _sign(tmp_path, issuer, _claims(nbf=now + 120)))
    assert not isinstance(error, CredentialExpiredError)


def test_tokens_live_no_longer_than_they_are_issued_for(tmp_path: Path, issuer: TokenIssuer) -> None:
    now, ttl = int(time.time()), issuer.settings.ttl_seconds
    assert issuer.verify(_sign(tmp_path, issuer, _claims(exp=now + ttl))).id == "key:alice"  # control
    for claims in (
        _claims(exp=now + 10 * 365 * 86400),  # signed with our key, but never issued like this
        _claims(iat=now - 600, nbf=now - 600, exp=now + ttl - 300),  # ttl + 300 from iat
        _claims(exp=str(now + 600)),  # PyJWT takes int("..."); a NumericDate is a number
        _claims(iat=float(now)),
    ):
        assert not isinstance(_rejected(issuer, _sign(tmp_path, issuer, claims)), CredentialExpiredError)


def test_gateway_tokens_carry_no_binding(tmp_path: Path, issuer: TokenIssuer) -> None:
    thumbprint = _b64(b"\0" * 32)
    for cnf in ({"x5t#S256": thumbprint}, {"jkt": thumbprint}, {}):
        _rejected(issuer, _sign(tmp_path, issuer, _claims(cnf=cnf)))
    assert issuer.verify(_sign(tmp_path, issuer, _claims())).id == "key:alice"


def test_wrong_audience_and_issuer(tmp_path: Path, issuer: TokenIssuer) -> None:
    other_audience = TokenIssuer.open(TokenSettings(audience="elsewhere"), tmp_path)
    assert other_audience.kid == issuer.kid  # same key file, different audience
    _rejected(issuer, other_audience.issue(ALICE)[0])
    other_issuer = TokenIssuer.open(TokenSettings(issuer="someone-else"), tmp_path)
    _rejected(issuer, other_issuer.issue(ALICE)[0])


@pytest.mark.parametrize("missing", ["iss", "aud", "sub", "iat", "nbf", "exp"])
def test_required_claims(tmp_path: Path, issuer: TokenIssuer, missing: str) -> None:
    _rejected(issuer, _sign(tmp_path, issuer, _claims(**{missing: None})))


@pytest.mark.parametrize(
    "overrides",
    [
        {"kind": "anonymous"},
        {"kind": None},
        {"groups": "admins"},
        {"groups": [1]},
        {"groups": [f"g{i}" for i in range(65)]},
        {"attrs": ["x"]},
        {"attrs": {"k": 1}},
        {"sub": ""},
        {"sub": 5},
        {"sub": "alice"},  # not in the API key namespace: gateway tokens are issued for keys only
        {"sub": "oidc:https://idp.example/alice"},
        {"kgen": -1},
        {"kgen": "1"},
        {"kgen": True},
    ],
)
def test_malformed_custom_claims(tmp_path: Path, issuer: TokenIssuer, overrides: dict[str, Any]) -> None:
    claims = _claims(**overrides)
    if "kind" in overrides and overrides["kind"] is None:
        claims.pop("kind", None)
    _rejected(issuer, _sign(tmp_path, issuer, claims))


def test_tampered_payload(issuer: TokenIssuer) -> None:
    token, _ = issuer.issue(ALICE)
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["groups"] = ["admins"]
    _rejected(issuer, f"{header}.{_b64json(claims)}.{signature}")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    _rejected(issuer, f"{header}.{payload}.{flipped}")


def test_alg_none_is_refused(issuer: TokenIssuer) -> None:
    for alg in ("none", "None", "NONE"):
        header = _b64json({"alg": alg, "typ": "at+jwt", "kid": issuer.kid})
        _rejected(issuer, f"{header}.{_b64json(_claims())}.")


def test_hs256_keyed_with_the_public_key_is_refused(issuer: TokenIssuer) -> None:
    jwk = issuer.jwks()["keys"][0]
    raw_public = base64.urlsafe_b64decode(jwk["x"] + "=")
    pem_public = serialization.load_der_public_key(
        bytes.fromhex("302a300506032b6570032100") + raw_public
    ).public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for secret in (raw_public, pem_public, jwk["x"].encode(), json.dumps(jwk).encode()):
        for alg in ("HS256", "EdDSA"):  # also the right alg name over an HMAC signature
            header = _b64json({"alg": alg, "typ": "at+jwt", "kid": issuer.kid})
            signing_input = f"{header}.{_b64json(_claims())}"
            mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
            _rejected(issuer, f"{signing_input}.{_b64(mac)}")


def test_other_keys_and_kids_are_refused(tmp_path: Path, issuer: TokenIssuer) -> None:
    stranger = Ed25519PrivateKey.generate()
    own_kid = {"kid": issuer.kid, "typ": "at+jwt"}
    _rejected(issuer, jwt.encode(_claims(), stranger, algorithm="EdDSA", headers=own_kid))
    _rejected(
        issuer, jwt.encode(_claims(), stranger, algorithm="EdDSA", headers={"kid": "x", "typ": "at+jwt"})
    )
    _rejected(issuer, _sign(tmp_path, issuer, _claims(), kid="unknown"))
    _rejected(issuer, _sign(tmp_path, issuer, _claims(), typ="JWT"))  # e.g. an id token shape
    _rejected(issuer, jwt.encode(_claims(), _private_key(tmp_path), algorithm="EdDSA"))  # no kid


def test_oversized_and_garbage_tokens(issuer: TokenIssuer) -> None:
    token, _ = issuer.issue(ALICE)
    _rejected(issuer, token + "A" * 5000)
    _rejected(issuer, "x" * 10_000_000)
    for garbage in ("", ".", "..", "a.b.c", "e30.e30.", "cbk_" + new_key_id() + "_" + new_secret()):
        _rejected(issuer, garbage)


# -- signing key -------------------------------------------------------------------------------


def test_key_file_is_created_owner_only_and_reused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = TokenIssuer.open(TokenSettings(), data_dir)
    key_file = data_dir / DEFAULT_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert TokenIssuer.open(TokenSettings(), data_dir).kid == first.kid
    assert [p.name for p in data_dir.iterdir()] == [DEFAULT_KEY_FILE]  # no temporary files left
    token, _ = first.issue(ALICE)
    assert TokenIssuer.open(TokenSettings(), data_dir).verify(token).id == "key:alice"
    os.chmod(key_file, 0o644)
    with pytest.raises(TokenKeyError, match="group or others"):
        TokenIssuer.open(TokenSettings(), data_dir)


def test_processes_starting_together_agree_on_one_key(tmp_path: Path) -> None:
    barrier = threading.Barrier(6)
    kids: list[str] = []

    def start() -> None:
        barrier.wait()
        kids.append(TokenIssuer.open(TokenSettings(), tmp_path).kid)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(kids) == 6
    assert len(set(kids)) == 1


def test_configured_key_file(tmp_path: Path) -> None:
    private = Ed25519PrivateKey.generate()
    pem = tmp_path / "signing.pem"
    pem.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pem.chmod(0o600)
    issuer = TokenIssuer.open(TokenSettings(key_file=pem), tmp_path / "unused")
    assert not (tmp_path / "unused").exists()
    token, _ = issuer.issue(ALICE)
    jwt.decode(token, private.public_key(), algorithms=["EdDSA"], audience="cedarberg")

    with pytest.raises(TokenKeyError, match="does not exist"):
        TokenIssuer.open(TokenSettings(key_file=tmp_path / "absent.pem"), tmp_path)
    ec_pem = tmp_path / "ec.pem"
    ec_pem.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(TokenKeyError, match="not an Ed25519"):
        TokenIssuer.open(TokenSettings(key_file=ec_pem), tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(TokenKeyError, match="cannot load"):
        TokenIssuer.open(TokenSettings(key_file=garbage), tmp_path)


def test_token_settings_validated() -> None:
    assert TokenSettings().ttl_seconds == 3600
    with pytest.raises(ValidationError):
        TokenSettings(ttl_seconds=10)
    with pytest.raises(ValidationError):
        TokenSettings(audience="")
    with pytest.raises(ValidationError):
        TokenSettings().issuer = "x"  # type: ignore[misc]


# -- OAuth2 token endpoint ---------------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[KeyStore]:
    key_store = await open_key_store(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}")
    yield key_store
    await key_store.close()


@pytest.fixture
def keys(store: KeyStore) -> ApiKeyAuthenticator:
    return ApiKeyAuthenticator(store, ApiKeySettings())


@pytest.fixture
def endpoint(keys: ApiKeyAuthenticator, issuer: TokenIssuer) -> TokenEndpoint:
    return TokenEndpoint(keys, issuer)


@pytest.fixture
async def credential(keys: ApiKeyAuthenticator) -> tuple[str, str]:
    """(client_id, client_secret) of a fresh key, split as Iceberg splits `credential=id:secret`."""
    _record, plaintext = await keys.create_key("etl", PrincipalKind.SERVICE, ["writers"])
    parsed = parse_api_key(plaintext)
    client_id, client_secret = f"{parsed.key_id}:{parsed.secret}".split(":", 1)
    return client_id, client_secret


def _ok(result: TokenResponse | OAuthError) -> TokenResponse:
    assert isinstance(result, TokenResponse), result
    return result


def _error(result: TokenResponse | OAuthError, error: str, status: int) -> OAuthError:
    assert isinstance(result, OAuthError), result
    assert (result.error, result.status) == (error, status)
    assert result.to_json() == {"error": error, "error_description": result.description}
    assert result.headers["Cache-Control"] == "no-store"
    return result


def _spark_form(client_id: str, client_secret: str) -> dict[str, str]:
    return {
        "grant_type": "client_credentials",
        "client_id": client_id,
        "client_secret": client_secret,
        "scope": "PRINCIPAL_ROLE:ALL",
    }


async def test_client_credentials_in_the_form_body(
    endpoint: TokenEndpoint, issuer: TokenIssuer, credential: tuple[str, str]
) -> None:
    result = _ok(await endpoint.handle(_spark_form(*credential), None))
    body = result.to_json()
    assert set(body) == {"access_token", "token_type", "expires_in", "issued_token_type"}
    assert body["token_type"] == "bearer"
    assert body["expires_in"] == 3600
    assert body["issued_token_type"] == ACCESS_TOKEN_TYPE
    assert result.status == 200
    assert result.headers["Cache-Control"] == "no-store"
    assert credential[1] not in repr(result)
    principal = issuer.verify(body["access_token"])
    assert (principal.id, principal.kind, principal.groups) == (
        "key:etl",
        PrincipalKind.SERVICE,
        frozenset({"writers"}),
    )
    assert principal.attributes == {"api_key_id": credential[0]}
    assert principal.auth_method is AuthMethod.GATEWAY_TOKEN


async def test_client_credentials_as_http_basic(endpoint: TokenEndpoint, credential: tuple[str, str]) -> None:
    form = {"grant_type": "client_credentials", "scope": "PRINCIPAL_ROLE:ALL"}
    _ok(await endpoint.handle(form, credential))
    _ok(await endpoint.client_credentials({**form, "client_id": credential[0]}, credential))
    _ok(await endpoint.handle(_spark_form(*credential), credential))  # both, agreeing
    conflicting = {**form, "client_id": new_key_id()}
    _error(await endpoint.handle(conflicting, credential), "invalid_request", 400)
    other_secret = {**form, "client_secret": new_secret()}
    _error(await endpoint.handle(other_secret, credential), "invalid_request", 400)


async def test_client_credentials_failures_are_generic(
    endpoint: TokenEndpoint, keys: ApiKeyAuthenticator, credential: tuple[str, str]
) -> None:
    """Well-formed credentials fail with one generic description whatever is wrong (a wrong
    secret, an unknown id, a revoked key); malformed ones with one description naming the
    expected form, the same for a real key id and an unknown one (decided on shape alone)."""
    client_id, client_secret = credential
    well_formed = [
        (_spark_form(client_id, new_secret()), None),  # wrong secret
        (_spark_form(new_key_id(), client_secret), None),  # unknown id
        ({"grant_type": "client_credentials"}, (client_id, new_secret())),  # wrong Basic
    ]
    malformed = [
        (_spark_form(client_id, "short"), None),  # malformed secret of a real key id
        (_spark_form(new_key_id(), "short"), None),  # the same for an unknown id
        (_spark_form("cbk_" + client_id, client_secret), None),  # whole-key prefix in the id
    ]
    descriptions: dict[str, set[str]] = {"well-formed": set(), "malformed": set()}
    for kind, attempts in (("well-formed", well_formed), ("malformed", malformed)):
        for form, basic in attempts:
            error = _error(await endpoint.handle(form, basic), "invalid_client", 401)
            assert error.headers["WWW-Authenticate"].startswith("Basic ")
            assert client_secret not in repr(error.to_json())
            descriptions[kind].add(error.description)
    await keys.revoke_key(client_id)
    descriptions["well-formed"].add(
        _error(await endpoint.handle(_spark_form(*credential), None), "invalid_client", 401).description
    )
    assert descriptions["well-formed"] == {"Client authentication failed"}
    (described,) = descriptions["malformed"]
    assert described.startswith("Client authentication failed: the credential is '<key id>:<secret>'")


async def test_the_whole_key_as_the_client_secret_is_its_id_and_secret(
    endpoint: TokenEndpoint, issuer: TokenIssuer, credential: tuple[str, str]
) -> None:
    """What `credential=cbk_...` sends (no client id): the same key, in one piece."""
    whole = f"cbk_{credential[0]}_{credential[1]}"
    form = {"grant_type": "client_credentials", "client_secret": whole}
    assert issuer.verify(_ok(await endpoint.handle(form, None)).access_token).id == "key:etl"
    assert issuer.verify(_ok(await endpoint.handle(form, ("", whole))).access_token).id == "key:etl"
    missing = _error(
        await endpoint.handle({**form, "client_secret": credential[1]}, None), "invalid_request", 400
    )
    assert "'<key id>:<secret>'" in missing.description


async def test_client_credentials_request_errors(
    endpoint: TokenEndpoint, credential: tuple[str, str]
) -> None:
    client_id, client_secret = credential
    for form in (
        {"grant_type": "client_credentials", "client_id": client_id},
        {"grant_type": "client_credentials", "client_secret": client_secret},
        {"grant_type": "client_credentials", "client_id": client_id, "client_secret": ""},
        {"grant_type": "client_credentials"},
        {"client_id": client_id, "client_secret": client_secret},
        {"grant_type": "", "client_id": client_id, "client_secret": client_secret},
    ):
        _error(await endpoint.handle(form, None), "invalid_request", 400)
    for grant in ("password", "authorization_code", "refresh_token", "CLIENT_CREDENTIALS"):
        form = {**_spark_form(client_id, client_secret), "grant_type": grant}
        _error(await endpoint.handle(form, None), "unsupported_grant_type", 400)
    exchange = {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange"}
    _error(await endpoint.client_credentials(exchange, None), "unsupported_grant_type", 400)


async def test_token_exchange_refreshes_while_the_key_is_active(
    endpoint: TokenEndpoint, issuer: TokenIssuer, keys: ApiKeyAuthenticator, credential: tuple[str, str]
) -> None:
    token = _ok(await endpoint.handle(_spark_form(*credential), None)).access_token
    refresh = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "scope": "PRINCIPAL_ROLE:ALL",
    }
    hashes = keys.hash_count
    fresh = _ok(await endpoint.handle(refresh, None))
    assert keys.hash_count == hashes  # refreshing re-checks the key without hashing
    assert issuer.verify(fresh.access_token).id == "key:etl"
    # The Java client's fallback: the same request with the credential as HTTP Basic.
    _ok(await endpoint.handle({**refresh, "subject_token": "expired-or-anything"}, credential))
    _error(await endpoint.handle({**refresh, "subject_token_type": "x"}, None), "invalid_request", 400)
    _error(await endpoint.handle({**refresh, "subject_token": "garbage"}, None), "invalid_request", 400)
    _error(await endpoint.handle({**refresh, "actor_token": token}, None), "invalid_request", 400)
    unknown_key = issuer.issue(ALICE)[0]  # issued for a key id that does not exist
    _error(await endpoint.handle({**refresh, "subject_token": unknown_key}, None), "invalid_request", 400)
    no_key = issuer.issue(Principal("bob", PrincipalKind.USER, frozenset(), AuthMethod.JWT))[0]
    _error(await endpoint.handle({**refresh, "subject_token": no_key}, None), "invalid_request", 400)
    await keys.revoke_key(credential[0])
    _error(await endpoint.handle(refresh, None), "invalid_request", 400)
    _error(await endpoint.handle(refresh, credential), "invalid_client", 401)
