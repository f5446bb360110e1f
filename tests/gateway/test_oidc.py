"""OIDC bearer tokens → Principal, against real identity providers and a real JWKS server.

- oauth2-mock-server (npm) and oidc-provider-mock (PyPI) run as processes on loopback
  (`tests.support.idp`); restarting one on the same port rotates its signing key.
- `LocalIssuer` is a tiny aiohttp issuer (discovery + JWKS) whose keys the test holds, so the
  negative cases can sign exactly the token they need and count every download.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from pydantic import ValidationError

from cedarberg.gateway.authn.errors import (
    AuthenticationError,
    CredentialExpiredError,
    UnsupportedBindingError,
)
from cedarberg.gateway.authn.oidc import OidcAuthenticator, peek_issuer
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.token_cache import VerifiedTokenCache
from cedarberg.gateway.config.authn import OidcIssuerSettings, OidcSettings, keys_url_allowed
from tests.support.idp import Oauth2MockServer, OidcProviderMock, ensure_oauth2_mock_server
from tests.support.ports import free_port

AUDIENCE = "cedarberg"
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


# -- keys and hand-made tokens -------------------------------------------------------------------


@functools.cache
def rsa_key(name: str, bits: int = 2048) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


@functools.cache
def ec_key(name: str) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_jwk(key: PrivateKey, kid: str | None, **members: Any) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(key.public_key(), as_dict=True)
    if kid is not None:
        jwk["kid"] = kid
    return {**jwk, **members}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64json(value: dict[str, Any]) -> str:
    return b64(json.dumps(value).encode())


def tamper(token: str, **claims: Any) -> str:
    """The token with its payload changed and the original signature kept."""
    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return ".".join((header, b64json({**decoded, **claims}), signature))


# -- a tiny real issuer ----------------------------------------------------------------------------


class LocalIssuer:
    """Discovery and JWKS over aiohttp on 127.0.0.1, with download counters."""

    def __init__(self) -> None:
        self.jwks: list[dict[str, Any]] = []
        self.discovery_hits = 0
        self.jwks_hits = 0
        self.jwks_delay = 0.0
        self.jwks_status = 200
        self.jwks_padding = 0
        self.discovery_issuer: str | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/keys"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/keys", self._keys)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _discovery(self, request: web.Request) -> web.Response:
        self.discovery_hits += 1
        return web.json_response({"issuer": self.discovery_issuer or self.issuer, "jwks_uri": self.jwks_url})

    async def _keys(self, request: web.Request) -> web.Response:
        self.jwks_hits += 1
        if self.jwks_delay:
            await asyncio.sleep(self.jwks_delay)
        if self.jwks_status != 200:
            return web.json_response({"error": "down"}, status=self.jwks_status)
        body: dict[str, Any] = {"keys": self.jwks}
        if self.jwks_padding:
            body["padding"] = "x" * self.jwks_padding
        return web.json_response(body)

    def publish(self, key: PrivateKey, kid: str | None, **members: Any) -> None:
        self.jwks.append(public_jwk(key, kid, **members))

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "alice",
            "iat": now,
            "exp": now + 300,
            "groups": ["readers"],
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def sign(
        self,
        key: PrivateKey | None = None,
        *,
        kid: str | None = "k1",
        alg: str = "RS256",
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        return jwt.encode(
            self.claims(**claims),
            key if key is not None else rsa_key("k1"),
            algorithm=alg,
            headers={**({"kid": kid} if kid is not None else {}), **(headers or {})},
        )


@pytest.fixture
async def local() -> AsyncIterator[LocalIssuer]:
    issuer = LocalIssuer()
    issuer.publish(rsa_key("k1"), "k1")
    await issuer.start()
    yield issuer
    await issuer.stop()


MakeAuth = Callable[..., OidcAuthenticator]


@pytest.fixture
async def make_auth() -> AsyncIterator[MakeAuth]:
    """`make_auth(issuer_settings, ..., **oidc_settings)`: an authenticator closed after the test."""
    made: list[OidcAuthenticator] = []

    def make(*issuers: OidcIssuerSettings, **settings: Any) -> OidcAuthenticator:
        auth = OidcAuthenticator(OidcSettings(issuers=issuers, **settings))
        made.append(auth)
        return auth

    yield make
    for auth in made:
        await auth.close()


def issuer_settings(issuer: str, **overrides: Any) -> OidcIssuerSettings:
    return OidcIssuerSettings(issuer=issuer, audiences=[AUDIENCE], **overrides)


async def refused(auth: OidcAuthenticator, token: str) -> type[Exception]:
    """The exact error class `authenticate` raised (fails the test if it returned a principal)."""
    with pytest.raises(AuthenticationError) as caught:
        await auth.authenticate(token)
    assert str(caught.value) == "Not authenticated"
    return caught.type


def _local_id(principal: Principal) -> str:
    """The subject part of an OIDC principal id (`oidc:<issuer namespace>/<subject>`)."""
    assert principal.id.startswith("oidc:"), principal.id
    assert principal.attributes["issuer"] in principal.id
    return principal.id.rsplit("/", 1)[1]


# -- real identity providers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def oauth2_idp() -> Iterator[Oauth2MockServer]:
    ensure_oauth2_mock_server()
    server = Oauth2MockServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def oidc_idp() -> Iterator[OidcProviderMock]:
    server = OidcProviderMock()
    server.start()
    yield server
    server.close()


async def test_oauth2_mock_server_client_credentials_token(
    oauth2_idp: Oauth2MockServer, make_auth: MakeAuth
) -> None:
    auth = make_auth(
        issuer_settings(
            oauth2_idp.issuer,
            principal_kind=PrincipalKind.SERVICE,
            attribute_claims={"client": "client_id", "scope": "scope"},
            groups_allowed=["readers"],
        )
    )
    token = oauth2_idp.client_credentials("spark-job", AUDIENCE, groups="writers readers", scope="catalog")
    assert jwt.get_unverified_header(token)["kid"]

    principal = await auth.authenticate(token)

    assert principal == Principal(
        id=f"oidc:{oauth2_idp.issuer}/spark-job",
        kind=PrincipalKind.SERVICE,
        # Scoped to the issuer (no alias: its URL); bare only what `groups_allowed` admits.
        groups=frozenset({f"{oauth2_idp.issuer}/writers", f"{oauth2_idp.issuer}/readers", "readers"}),
        auth_method=AuthMethod.JWT,
        attributes={"issuer": oauth2_idp.issuer, "client": "spark-job", "scope": "catalog"},
    )


async def test_oauth2_mock_server_scope_string_as_groups_and_wrong_audience(
    oauth2_idp: Oauth2MockServer, make_auth: MakeAuth
) -> None:
    auth = make_auth(
        issuer_settings(oauth2_idp.issuer, groups_claim="scope", groups_separator=" ", groups_allowed=["*"])
    )
    token = oauth2_idp.client_credentials("duck", AUDIENCE, scope="readers auditors")
    principal = await auth.authenticate(token)
    expected = {f"{oauth2_idp.issuer}/readers", f"{oauth2_idp.issuer}/auditors", "readers", "auditors"}
    assert (_local_id(principal), principal.groups) == ("duck", frozenset(expected))

    other_audience = oauth2_idp.client_credentials("duck", "some-other-api")
    assert await refused(auth, other_audience) is AuthenticationError


async def test_oauth2_mock_server_expired_token_and_leeway(
    oauth2_idp: Oauth2MockServer, make_auth: MakeAuth
) -> None:
    token = oauth2_idp.client_credentials("short-lived", AUDIENCE, expires_in="1")
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    strict = make_auth(issuer_settings(oauth2_idp.issuer, leeway_seconds=0))
    lenient = make_auth(issuer_settings(oauth2_idp.issuer, leeway_seconds=30))
    assert _local_id(await strict.authenticate(token)) == "short-lived"  # still valid right now

    await asyncio.sleep(max(0.0, expires - time.time()) + 0.1)

    assert await refused(strict, token) is CredentialExpiredError
    assert _local_id(await lenient.authenticate(token)) == "short-lived"  # expired, but within the leeway


async def test_stock_oauth2_mock_server_rotation_is_picked_up_after_refresh(make_auth: MakeAuth) -> None:
    # The stock CLI's client_credentials token names no client (no `sub`, no `client_id`): with the
    # default principal claim it is refused; configured to use `scope`, it maps to a principal.
    server = Oauth2MockServer(stock=True)
    server.start()
    try:
        auth = make_auth(
            issuer_settings(server.issuer, principal_claim="scope"), refresh_min_interval_seconds=0.2
        )
        old = server.client_credentials("ignored", AUDIENCE, scope="svc-etl")
        assert _local_id(await auth.authenticate(old)) == "svc-etl"
        no_sub = make_auth(issuer_settings(server.issuer))
        assert await refused(no_sub, old) is AuthenticationError  # principal claim `sub` missing

        server.restart()  # new process, new RSA key and kid, same issuer
        await asyncio.sleep(0.25)
        new = server.client_credentials("ignored", AUDIENCE, scope="svc-etl")
        assert jwt.get_unverified_header(new)["kid"] != jwt.get_unverified_header(old)["kid"]

        assert _local_id(await auth.authenticate(new)) == "svc-etl"
        assert await refused(auth, old) is AuthenticationError  # its key is gone from the JWKS
    finally:
        server.close()


async def test_oauth2_mock_server_es256_key(make_auth: MakeAuth, tmp_path: Path) -> None:
    jwk = {**ECAlgorithm.to_jwk(ec_key("idp"), as_dict=True), "kid": "ec-1", "alg": "ES256"}
    (tmp_path / "ec.json").write_text(json.dumps(jwk))
    server = Oauth2MockServer(jwk_files=(tmp_path / "ec.json",))
    server.start()
    try:
        token = server.client_credentials("ec-client", AUDIENCE)
        assert jwt.get_unverified_header(token)["alg"] == "ES256"
        assert _local_id(await make_auth(issuer_settings(server.issuer)).authenticate(token)) == "ec-client"
        rsa_only = make_auth(issuer_settings(server.issuer, algorithms=["RS256"]))
        assert await refused(rsa_only, token) is AuthenticationError
    finally:
        server.close()


async def test_oidc_provider_mock_id_token_without_kid(
    oidc_idp: OidcProviderMock, make_auth: MakeAuth
) -> None:
    oidc_idp.set_user("alice", {"groups": ["readers", "writers"], "email": "alice@example.com"})
    token = oidc_idp.id_token("alice", client_id=AUDIENCE)
    assert "kid" not in jwt.get_unverified_header(token)

    auth = make_auth(issuer_settings(oidc_idp.issuer, groups_allowed=["readers"]))
    principal = await auth.authenticate(token)

    assert _local_id(principal) == "alice"
    scoped = {f"{oidc_idp.issuer}/readers", f"{oidc_idp.issuer}/writers"}
    assert principal.groups == frozenset({*scoped, "readers"})
    assert principal.auth_method is AuthMethod.JWT
    assert principal.kind is PrincipalKind.USER


async def test_oidc_provider_mock_nested_groups_prefix_and_audience(
    oidc_idp: OidcProviderMock, make_auth: MakeAuth
) -> None:
    oidc_idp.set_user("bob", {"realm_access": {"roles": ["admins"]}})
    token = oidc_idp.id_token("bob", client_id=AUDIENCE)
    auth = make_auth(
        issuer_settings(
            oidc_idp.issuer,
            groups_claim="realm_access.roles",
            principal_prefix="corp:",
            privileged_groups_allowed=["admins"],  # the organisation's own IdP, opted in
        )
    )
    principal = await auth.authenticate(token)
    admins = frozenset({f"{oidc_idp.issuer}/admins", "admins"})
    assert (_local_id(principal), principal.groups) == ("corp:bob", admins)

    for_other_client = oidc_idp.id_token("bob", client_id="another-app")
    assert await refused(auth, for_other_client) is AuthenticationError


async def test_oidc_provider_mock_rotation_without_kid(make_auth: MakeAuth) -> None:
    server = OidcProviderMock()
    server.start()
    try:
        auth = make_auth(issuer_settings(server.issuer), refresh_min_interval_seconds=0.2)
        old = server.id_token("carol", client_id=AUDIENCE)
        assert _local_id(await auth.authenticate(old)) == "carol"

        server.restart()  # a new RSA key; neither token names a kid
        await asyncio.sleep(0.25)
        new = server.id_token("carol", client_id=AUDIENCE)

        assert _local_id(await auth.authenticate(new)) == "carol"  # bad signature → one refresh → new key
        assert await refused(auth, old) is AuthenticationError
    finally:
        server.close()


# -- bad tokens, signed exactly as needed --------------------------------------------------------


async def test_valid_local_token(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer, alias="local", groups_allowed=["*"]))
    principal = await auth.authenticate(local.sign(groups=["readers", "auditors"]))
    assert principal.groups == frozenset({"local/readers", "local/auditors", "readers", "auditors"})
    assert principal.attributes == {"issuer": local.issuer}
    assert (local.discovery_hits, local.jwks_hits) == (1, 1)


async def test_alg_none_is_refused(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    for alg in ("none", "None", "NONE"):
        token = f"{b64json({'alg': alg, 'kid': 'k1'})}.{b64json(local.claims())}."
        assert await refused(auth, token) is AuthenticationError
    assert local.jwks_hits == 0  # refused before any key is looked up


async def test_hs256_signed_with_the_public_key_is_refused(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    await auth.authenticate(local.sign())  # keys are loaded
    public = rsa_key("k1").public_key()
    for secret in (
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        json.dumps(public_jwk(rsa_key("k1"), "k1")).encode(),
    ):
        signing_input = f"{b64json({'alg': 'HS256', 'typ': 'JWT', 'kid': 'k1'})}.{b64json(local.claims())}"
        signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        assert await refused(auth, f"{signing_input}.{b64(signature)}") is AuthenticationError


async def test_symmetric_keys_in_the_jwks_are_ignored(local: LocalIssuer, make_auth: MakeAuth) -> None:
    local.jwks.append({"kty": "oct", "kid": "shared", "k": b64(b"0" * 32), "alg": "HS256"})
    auth = make_auth(issuer_settings(local.issuer))
    token = jwt.encode(local.claims(), b"0" * 32, algorithm="HS256", headers={"kid": "shared"})
    assert await refused(auth, token) is AuthenticationError
    # The oct entry does not count as a key: a kid-less token still finds the single RSA key.
    assert _local_id(await auth.authenticate(local.sign(kid=None))) == "alice"


async def test_key_type_must_match_the_algorithm(local: LocalIssuer, make_auth: MakeAuth) -> None:
    local.publish(ec_key("ec"), "ec")
    local.publish(rsa_key("pinned"), "pinned", alg="RS256")
    auth = make_auth(issuer_settings(local.issuer, algorithms=["RS256", "PS256", "ES256"]))
    assert _local_id(await auth.authenticate(local.sign(ec_key("ec"), kid="ec", alg="ES256"))) == "alice"
    # An RSA signature presented under the EC key's kid: that key cannot verify RS256.
    assert await refused(auth, local.sign(rsa_key("k1"), kid="ec", alg="RS256")) is AuthenticationError
    # The JWK pins RS256, so a PS256 signature by the very same key is refused.
    assert (
        await refused(auth, local.sign(rsa_key("pinned"), kid="pinned", alg="PS256")) is AuthenticationError
    )
    assert _local_id(await auth.authenticate(local.sign(rsa_key("pinned"), kid="pinned"))) == "alice"


async def test_algorithm_not_pinned_for_the_issuer(local: LocalIssuer, make_auth: MakeAuth) -> None:
    local.publish(rsa_key("k1"), "k1-ps")
    auth = make_auth(issuer_settings(local.issuer, algorithms=["RS256"]))
    assert await refused(auth, local.sign(kid="k1-ps", alg="PS256")) is AuthenticationError
    assert await refused(auth, local.sign(ec_key("ec"), alg="ES256")) is AuthenticationError


async def test_wrong_issuer_is_refused_without_any_download(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    assert await refused(auth, local.sign(iss="http://127.0.0.1:9/evil")) is AuthenticationError
    assert await refused(auth, local.sign(iss=local.issuer + "/")) is AuthenticationError
    assert await refused(auth, local.sign(iss=None)) is AuthenticationError
    assert (local.discovery_hits, local.jwks_hits) == (0, 0)


async def test_wrong_or_missing_audience(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    assert await refused(auth, local.sign(aud="other")) is AuthenticationError
    assert await refused(auth, local.sign(aud=None)) is AuthenticationError
    assert _local_id(await auth.authenticate(local.sign(aud=["other", AUDIENCE]))) == "alice"
    several = make_auth(OidcIssuerSettings(issuer=local.issuer, audiences=["a", "b"]))
    assert _local_id(await several.authenticate(local.sign(aud="b"))) == "alice"


async def test_expired_and_not_yet_valid(local: LocalIssuer, make_auth: MakeAuth) -> None:
    now = int(time.time())
    auth = make_auth(issuer_settings(local.issuer))  # leeway 30 s
    assert await refused(auth, local.sign(exp=now - 3600)) is CredentialExpiredError
    assert _local_id(await auth.authenticate(local.sign(exp=now - 10))) == "alice"  # within the leeway
    assert await refused(auth, local.sign(nbf=now + 3600)) is AuthenticationError
    assert _local_id(await auth.authenticate(local.sign(nbf=now + 10))) == "alice"  # within the leeway
    assert await refused(auth, local.sign(exp=None)) is AuthenticationError  # exp is required
    # "Expired" is only said of a token whose signature holds.
    forged = tamper(local.sign(exp=now - 3600), sub="mallory")
    assert await refused(auth, forged) is AuthenticationError


async def test_unknown_kid_and_tampered_payload(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    assert await refused(auth, local.sign(rsa_key("stranger"), kid="stranger")) is AuthenticationError
    token = local.sign()
    assert await refused(auth, tamper(token, sub="admin", groups=["admins"])) is AuthenticationError
    header, payload, signature = token.split(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    assert await refused(auth, f"{header}.{payload}.{flipped}") is AuthenticationError
    # A key embedded in the token's header is never trusted.
    embedded = local.sign(
        rsa_key("stranger"), kid="k1", headers={"jwk": public_jwk(rsa_key("stranger"), "k1")}
    )
    assert await refused(auth, embedded) is AuthenticationError


async def test_oversized_and_malformed_tokens_cost_nothing(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    big = local.sign(padding="x" * 17 * 1024)
    assert len(big) > 16 * 1024
    assert await refused(auth, big) is AuthenticationError
    nested = b64(b"[" * 6000)
    junk_tokens = (
        "",
        "abc",
        "a.b.c",
        "a.b.c.d",
        "é.é.é",
        f"{b64(b'[1]')}.{b64(b'[2]')}.",
        "x" * 100_000,
        f"{nested}.{b64json({})}.",
        f"{b64json({'alg': 'RS256'})}.{nested}.",  # nesting past the recursion limit
    )
    for junk in junk_tokens:
        assert await refused(auth, junk) is AuthenticationError
    assert (local.discovery_hits, local.jwks_hits) == (0, 0)
    small = make_auth(issuer_settings(local.issuer), max_token_bytes=1024)
    assert await refused(small, local.sign(padding="x" * 1024)) is AuthenticationError


async def test_kid_less_token_needs_exactly_one_key(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    assert _local_id(await auth.authenticate(local.sign(kid=None))) == "alice"
    local.publish(rsa_key("k2"), "k2")
    two_keys = make_auth(issuer_settings(local.issuer))
    assert await refused(two_keys, local.sign(kid=None)) is AuthenticationError
    assert _local_id(await two_keys.authenticate(local.sign(rsa_key("k2"), kid="k2"))) == "alice"


async def test_principal_and_groups_claims(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(
        issuer_settings(local.issuer, principal_claim="email", groups_claim="https://x.io/groups")
    )
    groups_claim: dict[str, Any] = {"https://x.io/groups": ["etl"]}  # a URL-named claim, dots and all
    token = local.sign(email="dana@example.com", **groups_claim)
    principal = await auth.authenticate(token)
    assert (_local_id(principal), principal.groups) == (
        "dana@example.com",
        frozenset({f"{local.issuer}/etl"}),
    )
    assert await refused(auth, local.sign()) is AuthenticationError  # no email claim
    assert await refused(auth, local.sign(email="")) is AuthenticationError
    for bad in ([1, 2], {"etl": True}, 7):
        bad_groups: dict[str, Any] = {"https://x.io/groups": bad}
        assert await refused(auth, local.sign(email="e@x", **bad_groups)) is AuthenticationError
    no_groups = make_auth(issuer_settings(local.issuer, groups_claim=None))
    assert (await no_groups.authenticate(local.sign())).groups == frozenset()
    missing = await make_auth(issuer_settings(local.issuer)).authenticate(local.sign(groups=None))
    assert missing.groups == frozenset()


async def test_a_string_groups_claim_is_one_group_unless_a_separator_is_set(
    local: LocalIssuer, make_auth: MakeAuth
) -> None:
    # Attack: the organisation's issuer may assert `admins`; a string claim with a no-break space
    # (or any other whitespace, or a comma) between two names is still one group, not `admins`.
    org = make_auth(
        issuer_settings(local.issuer, alias="org", groups_allowed=["*"], privileged_groups_allowed=["admins"])
    )
    for spelling in ("ops\u00a0admins", "ops admins", "ops,admins", "ops\u2003admins\n"):
        principal = await org.authenticate(local.sign(groups=spelling))
        assert principal.groups == frozenset({f"org/{spelling}", spelling}), spelling
        assert "admins" not in principal.groups
    # Control: with a separator configured, the claim is split on exactly that separator.
    split = make_auth(issuer_settings(local.issuer, alias="org", groups_allowed=["*"], groups_separator=","))
    principal = await split.authenticate(local.sign(groups="readers,etl,,ops\u00a0admins"))
    assert principal.groups == frozenset(
        {"org/readers", "org/etl", "org/ops\u00a0admins", "readers", "etl", "ops\u00a0admins"}
    )
    # A list claim is never split, separator or not.
    listed = await split.authenticate(local.sign(groups=["a,b"]))
    assert listed.groups == frozenset({"org/a,b", "a,b"})


async def test_groups_are_scoped_to_the_issuer_that_asserts_them(
    local: LocalIssuer, make_auth: MakeAuth
) -> None:
    partner = LocalIssuer()
    partner.publish(ec_key("partner"), "p1")
    await partner.start()
    try:
        auth = make_auth(
            issuer_settings(
                local.issuer, alias="org", groups_allowed=["analysts"], privileged_groups_allowed=["admins"]
            ),
            issuer_settings(partner.issuer, alias="partner"),
        )
        claims = {"groups": ["admins", "analysts", "monitoring", "org/analysts"]}
        theirs = await auth.authenticate(partner.sign(ec_key("partner"), kid="p1", alg="ES256", **claims))
        # Attack: the partner's `admins`, `analysts` and even a spelled-out `org/analysts` stay its own.
        assert theirs.groups == frozenset(
            {"partner/admins", "partner/analysts", "partner/monitoring", "partner/org/analysts"}
        )
        # Control: the organisation's issuer asserts what it was allowed to, bare, besides the scoped form.
        mine = await auth.authenticate(local.sign(**claims))
        assert mine.groups == frozenset(
            {"org/admins", "org/analysts", "org/monitoring", "org/org/analysts", "admins", "analysts"}
        )
    finally:
        await partner.stop()


# -- key downloads: bounded, single flight, rotation ---------------------------------------------


async def test_unknown_kids_cannot_force_downloads(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))  # default: at most one download per 30 s
    assert _local_id(await auth.authenticate(local.sign())) == "alice"
    tokens = [local.sign(rsa_key("stranger"), kid=f"kid-{i}") for i in range(50)]
    results = await asyncio.gather(*(auth.authenticate(t) for t in tokens), return_exceptions=True)
    assert all(type(result) is AuthenticationError for result in results)
    assert (local.discovery_hits, local.jwks_hits) == (1, 1)


async def test_unknown_kid_refreshes_at_most_once_per_interval(
    local: LocalIssuer, make_auth: MakeAuth
) -> None:
    auth = make_auth(issuer_settings(local.issuer), refresh_min_interval_seconds=0.5)
    await auth.authenticate(local.sign())
    await asyncio.sleep(0.6)
    local.jwks_delay = 0.2  # concurrent callers overlap with the download

    tokens = [local.sign(rsa_key("stranger"), kid=f"kid-{i}") for i in range(20)]
    results = await asyncio.gather(*(auth.authenticate(t) for t in tokens), return_exceptions=True)
    assert all(type(result) is AuthenticationError for result in results)
    for token in tokens:
        assert await refused(auth, token) is AuthenticationError
    assert local.jwks_hits == 2  # the first load and exactly one refresh
    assert local.discovery_hits == 1  # the jwks_uri stays cached


async def test_concurrent_first_use_downloads_once(local: LocalIssuer, make_auth: MakeAuth) -> None:
    local.jwks_delay = 0.3
    auth = make_auth(issuer_settings(local.issuer))
    principals = await asyncio.gather(*(auth.authenticate(local.sign()) for _ in range(10)))
    assert {_local_id(p) for p in principals} == {"alice"}
    assert (local.discovery_hits, local.jwks_hits) == (1, 1)


async def test_rotated_keys_are_picked_up_after_refresh(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer), refresh_min_interval_seconds=0.3)
    old = local.sign()
    assert _local_id(await auth.authenticate(old)) == "alice"
    local.jwks = [public_jwk(rsa_key("k2"), "k2")]  # the issuer rotates: k2 in, k1 out
    await asyncio.sleep(0.35)
    assert _local_id(await auth.authenticate(local.sign(rsa_key("k2"), kid="k2"))) == "alice"
    assert local.jwks_hits == 2
    assert await refused(auth, old) is AuthenticationError


async def test_failed_downloads_are_bounded_and_keep_the_last_good_keys(
    local: LocalIssuer, make_auth: MakeAuth
) -> None:
    local.jwks_status = 500
    auth = make_auth(issuer_settings(local.issuer), refresh_min_interval_seconds=0.3, cache_ttl_seconds=0.3)
    token = local.sign()
    assert await refused(auth, token) is AuthenticationError
    assert await refused(auth, token) is AuthenticationError
    assert local.jwks_hits == 1
    local.jwks_status = 200
    await asyncio.sleep(0.35)
    assert _local_id(await auth.authenticate(token)) == "alice"
    local.jwks_status = 503
    await asyncio.sleep(0.35)  # the cache expires, the refresh fails, the old keys still verify
    assert _local_id(await auth.authenticate(token)) == "alice"
    assert local.jwks_hits == 3


async def test_discovery_and_document_limits(local: LocalIssuer, make_auth: MakeAuth) -> None:
    local.discovery_issuer = "https://evil.example"
    assert await refused(make_auth(issuer_settings(local.issuer)), local.sign()) is AuthenticationError
    assert local.jwks_hits == 0

    local.discovery_issuer = None
    local.jwks_padding = 4096
    small = make_auth(issuer_settings(local.issuer), max_document_bytes=2048)
    assert await refused(small, local.sign()) is AuthenticationError

    local.jwks_padding = 0
    local.jwks_status = 299  # anything but 200 is refused
    assert await refused(make_auth(issuer_settings(local.issuer)), local.sign()) is AuthenticationError

    local.jwks_status = 200
    direct = make_auth(issuer_settings(local.issuer, jwks_uri=local.jwks_url))
    assert _local_id(await direct.authenticate(local.sign())) == "alice"
    assert local.discovery_hits == 3  # the three above; the jwks_uri override skips discovery


async def test_unreachable_issuer(make_auth: MakeAuth) -> None:
    issuer = f"http://127.0.0.1:{free_port()}"
    auth = make_auth(issuer_settings(issuer), fetch_timeout_seconds=2)
    token = jwt.encode(
        {"iss": issuer, "aud": AUDIENCE, "sub": "x", "exp": int(time.time()) + 60},
        rsa_key("k1"),
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    assert await refused(auth, token) is AuthenticationError
    await auth.warm_up()  # logs, never raises


async def test_multiple_issuers_and_routing(local: LocalIssuer, make_auth: MakeAuth) -> None:
    other = LocalIssuer()
    other.publish(ec_key("other"), "o1")
    await other.start()
    try:
        auth = make_auth(issuer_settings(local.issuer), issuer_settings(other.issuer, principal_prefix="o:"))
        assert auth.issuers == {local.issuer, other.issuer}
        mine = local.sign()
        theirs = other.sign(ec_key("other"), kid="o1", alg="ES256")
        assert auth.handles(mine)
        assert auth.handles(theirs)
        assert not auth.handles("cbk_abcdefghijklmnop_" + "x" * 43)
        assert peek_issuer(theirs) == other.issuer
        assert (await auth.authenticate(mine)).id == f"oidc:{local.issuer}/alice"
        assert (await auth.authenticate(theirs)).id == f"oidc:{other.issuer}/o:alice"
        # One issuer's key does not verify the other's tokens.
        crossed = other.sign(rsa_key("k1"), kid="k1")
        assert await refused(auth, crossed) is AuthenticationError
    finally:
        await other.stop()


async def test_rejections_are_logged_without_the_token(
    local: LocalIssuer, make_auth: MakeAuth, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cedarberg.authn.oidc")
    auth = make_auth(issuer_settings(local.issuer))
    now = int(time.time())
    tokens = [
        local.sign(aud="other"),
        local.sign(exp=now - 3600),
        local.sign(kid="nope"),
        tamper(local.sign(), sub="root"),
        local.sign(iss="http://elsewhere"),
    ]
    for token in tokens:
        await refused(auth, token)
    text = caplog.text
    for reason in ("Audience", "expired", "unknown kid", "signature", "not configured"):
        assert reason in text
    for token in tokens:
        for part in token.split("."):
            assert part not in text


# -- settings ----------------------------------------------------------------------------------------


def test_settings_refuse_unsafe_algorithms_and_urls() -> None:
    for algorithms in (["none"], ["HS256"], ["RS256", "hs512"], ["RS1"], []):
        with pytest.raises(ValidationError):
            OidcIssuerSettings(issuer="https://idp.example", audiences=["a"], algorithms=algorithms)
    with pytest.raises(ValidationError):
        OidcIssuerSettings(issuer="http://idp.example", audiences=["a"])
    with pytest.raises(ValidationError):
        OidcIssuerSettings(issuer="https://idp.example", audiences=["a"], jwks_uri="http://idp.example/k")
    with pytest.raises(ValidationError):
        OidcIssuerSettings(issuer="https://idp.example", audiences=[])
    with pytest.raises(ValidationError):
        OidcSettings(issuers=[{"issuer": "https://a.example", "audiences": "x"}] * 2)
    with pytest.raises(ValidationError):
        OidcIssuerSettings(issuer="https://idp.example", audiences="a", leeway_seconds="forever")

    settings = OidcIssuerSettings(issuer="https://idp.example", audiences="cedarberg")
    assert settings.audiences == ("cedarberg",)
    assert settings.algorithms == ("RS256", "ES256")
    assert (settings.principal_claim, settings.groups_claim, settings.leeway_seconds) == ("sub", "groups", 30)
    assert OidcIssuerSettings(issuer="http://idp.internal", audiences="a", unsafe_allow_http=True)
    assert OidcIssuerSettings(issuer="http://[::1]:8080", audiences="a")
    with pytest.raises(ValidationError):
        settings.model_copy(update={}).__setattr__("issuer", "https://other")  # frozen


async def test_principal_ids_are_namespaced_by_issuer_alias(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer, alias="corp"))
    assert (await auth.authenticate(local.sign())).id == "oidc:corp/alice"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"alias": "corp"}, {"alias": "corp"}),
        ({}, {}),  # one issuer URL is a prefix of the other's
    ],
)
def test_issuer_namespaces_must_not_overlap(first: dict[str, Any], second: dict[str, Any]) -> None:
    one = {"issuer": "https://idp.example/realms/a", "audiences": [AUDIENCE], **first}
    two = {"issuer": "https://idp.example/realms", "audiences": [AUDIENCE], **second}
    with pytest.raises(ValidationError, match="overlap"):
        OidcSettings(issuers=(OidcIssuerSettings(**one), OidcIssuerSettings(**two)))


def test_issuer_aliases_are_validated() -> None:
    for bad in ["", "a/b", "-x", "x" * 65]:
        with pytest.raises(ValidationError):
            issuer_settings("https://idp.example", alias=bad)


# -- what a token is trusted for: lifetime, its key, its binding (issue 27, section 8) -----------


async def test_token_lifetime_is_bounded_per_issuer(local: LocalIssuer, make_auth: MakeAuth) -> None:
    now = int(time.time())
    hour = make_auth(issuer_settings(local.issuer, max_token_lifetime_seconds=3600))
    assert _local_id(await hour.authenticate(local.sign(exp=now + 3000))) == "alice"  # control
    assert _local_id(await hour.authenticate(local.sign(iat=None, exp=now + 3000))) == "alice"
    for claims in (
        {"exp": now + 7200},  # too far from now
        {"iat": None, "exp": now + 7200},
        {"iat": now - 1000, "exp": now + 3000},  # within an hour of now, not of its issue
        {"exp": str(now + 600)},  # PyJWT accepts int("..."); a NumericDate is a JSON number
        {"iat": str(now)},
        {"exp": None},
    ):
        assert await refused(hour, local.sign(**claims)) is AuthenticationError, claims
    default = make_auth(issuer_settings(local.issuer))
    assert await refused(default, local.sign(exp=now + 10 * 365 * 86400)) is AuthenticationError
    assert _local_id(await default.authenticate(local.sign(exp=now + 20 * 3600))) == "alice"
    for bad in (59, 7 * 86400 + 1):
        with pytest.raises(ValidationError):
            issuer_settings(local.issuer, max_token_lifetime_seconds=bad)


async def test_remembered_verifications_end_with_their_key(local: LocalIssuer, make_auth: MakeAuth) -> None:
    cache = VerifiedTokenCache()
    auth = make_auth(issuer_settings(local.issuer), cache_ttl_seconds=0.4, refresh_min_interval_seconds=0.1)
    old = local.sign()
    cache.put(old, await auth.authenticate(old))
    assert cache.get(old) is not None
    local.publish(rsa_key("k2"), "k2")
    kept = local.sign(rsa_key("k2"), kid="k2")
    await asyncio.sleep(0.15)  # past refresh_min_interval_seconds
    principal = await auth.authenticate(kept)  # unknown kid: the set (k1, k2) is downloaded again
    cache.put(kept, principal)
    assert cache.get(old) is not None  # k1 was kept across that refresh: its lease holds
    local.jwks = [public_jwk(rsa_key("k2"), "k2")]  # k1 withdrawn; nothing else happens
    await asyncio.sleep(0.45)
    # The set is due for a refresh: no remembered verification is used until it is refreshed.
    assert cache.get(old) is None
    assert await refused(auth, old) is AuthenticationError  # the refresh withdrew k1
    assert _local_id(await auth.authenticate(kept)) == "alice"
    cache.put(kept, principal)
    assert cache.get(kept) is principal  # control: k2 stayed, and so did its lease
    await auth.close()  # the issuer goes away: every verification of its keys ends
    assert cache.get(kept) is None


async def test_certificate_bound_tokens(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    cache = VerifiedTokenCache()
    certificate, other = hashlib.sha256(b"alice's cert").digest(), hashlib.sha256(b"bob's cert").digest()
    bound = local.sign(cnf={"x5t#S256": b64(certificate)})
    assert await refused(auth, bound) is AuthenticationError  # no client certificate
    with pytest.raises(AuthenticationError):
        await auth.authenticate(bound, lambda: other)
    principal = await auth.authenticate(bound, lambda: certificate)  # control
    assert principal.proof is not None
    assert principal.proof.certificate_sha256 == certificate
    cache.put(bound, principal)
    assert cache.get(bound, lambda: certificate) is principal
    assert cache.get(bound) is None
    assert cache.get(bound, lambda: other) is None
    assert cache.get(bound, lambda: certificate) is principal  # a refused connection evicts nothing

    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spelling = b64(certificate)
    noncanonical = spelling[:-1] + alphabet[alphabet.index(spelling[-1]) | 1]
    assert base64.urlsafe_b64decode(noncanonical + "=") == certificate  # same bytes, other spelling
    for cnf in (
        {"x5t#S256": noncanonical},
        {"x5t#S256": b64(certificate) + "A"},
        {"x5t#S256": b64(certificate[:20])},
        {"x5t#S256": b64(certificate), "kid": "k"},  # a second method that cannot be checked
        {"jwk": public_jwk(rsa_key("k1"), None)},
        {},
        [b64(certificate)],
    ):
        assert await refused(auth, local.sign(cnf=cnf)) is AuthenticationError, cnf
        with pytest.raises(AuthenticationError):
            await auth.authenticate(local.sign(cnf=cnf), lambda: certificate)


async def test_dpop_bound_tokens_are_refused_as_unsupported(local: LocalIssuer, make_auth: MakeAuth) -> None:
    auth = make_auth(issuer_settings(local.issuer))
    jkt = b64(hashlib.sha256(b"a DPoP key").digest())
    assert await refused(auth, local.sign(cnf={"jkt": jkt})) is UnsupportedBindingError
    # Decided on verified claims only: a forged binding is an ordinary failure.
    assert await refused(auth, tamper(local.sign(), cnf={"jkt": jkt})) is AuthenticationError


def test_an_https_issuers_key_urls_must_be_https() -> None:
    for url in ("http://127.0.0.1:8080/keys", "http://localhost/keys", "ftp://idp.example/keys"):
        assert not keys_url_allowed(url, issuer="https://idp.example", allow_http=True)
        for name in ("jwks_uri", "discovery_url"):
            with pytest.raises(ValidationError, match="https"):
                OidcIssuerSettings(
                    issuer="https://idp.example", audiences=[AUDIENCE], unsafe_allow_http=True, **{name: url}
                )
    assert keys_url_allowed("https://keys.idp.example/jwks", issuer="https://idp.example", allow_http=False)
    # Control: a loopback http issuer (development) may keep its keys on loopback http.
    assert keys_url_allowed("http://127.0.0.1:9/keys", issuer="http://127.0.0.1:8", allow_http=False)
    assert OidcIssuerSettings(
        issuer="http://127.0.0.1:8", audiences=[AUDIENCE], jwks_uri="http://127.0.0.1:9/k"
    )
