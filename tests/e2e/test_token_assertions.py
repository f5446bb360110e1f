"""An OIDC token is trusted only as far as its issuer's keys and its own limits, through a real
gateway over TLS with client certificates (issue 27, section 8, tokens).

The issuers are `KeySetServer`s: discovery and JWKS over HTTPS (the test PKI's server certificate,
trusted by the gateway through ``SSL_CERT_FILE``) whose keys the test holds, so it signs exactly
the token each case needs. ``corp`` publishes its keys over https; ``partner``'s discovery
document points its keys at plain http on loopback. A Cedar policy names ``oidc:corp/alice``, so
what is allowed does not depend on groups.

Attacks: a ten-year token; a token still remembered (verified-token cache, read plans) after its
key left the JWKS; a ``cnf.x5t#S256``-bound token without its certificate or with another one; a
DPoP-bound token; an https issuer whose keys come over http. Controls: an ordinary token, the
bound token with its certificate, a rotation to a new kid.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.support.gateway import bundled_policies
from tests.support.idp import KeySetServer
from tests.support.secure import GENEROUS_RATE_LIMITS, HTTP_TIMEOUT, SecureGateway
from tests.support.tls import ClientCert, TestPki, make_pki

AUDIENCE = "cedarberg"
ALICE_READS = """
@id("alice-reads")
permit (
  principal == Cedarberg::User::"oidc:corp/alice",
  action in [Cedarberg::Action::"read"],
  resource
);
"""
REFRESH_INTERVAL = 0.3  # oidc.refresh_min_interval_seconds of the gateway under test


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    return {**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "alg": "RS256", "use": "sig"}


def _thumbprint(cert: ClientCert) -> str:
    """RFC 8705 `x5t#S256`: base64url of the SHA-256 of the certificate's DER."""
    der = x509.load_pem_x509_certificate(cert.cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode("ascii")


def _own_files(pki: TestPki, common_name: str, name: str) -> ClientCert:
    """A client certificate under files of its own (`issue_client` names them by CN)."""
    issued = pki.issue_client(common_name)
    cert = issued.cert.rename(pki.directory / f"{name}.pem")
    return ClientCert(
        cert=cert, key=issued.key.rename(pki.directory / f"{name}-key.pem"), subject=issued.subject
    )


@dataclass
class Setup:
    gw: SecureGateway
    pki: TestPki
    corp: KeySetServer
    partner: KeySetServer
    keys: dict[str, rsa.RSAPrivateKey]
    alice_cert: ClientCert
    alice_twin: ClientCert  # same subject and CA as alice_cert, another key: another certificate
    bob_cert: ClientCert

    def token(self, kid: str = "k1", issuer: KeySetServer | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {
            "iss": (issuer or self.corp).issuer,
            "aud": AUDIENCE,
            "sub": "alice",
            "iat": now,
            "exp": now + 300,
            "jti": f"{kid}-{time.monotonic_ns()}",  # every token distinct: no earlier verification
            **claims,
        }
        body = {name: value for name, value in body.items() if value is not None}
        return jwt.encode(body, self.keys[kid], algorithm="RS256", headers={"kid": kid})

    def read(self, token: str, cert: ClientCert | None = None) -> requests.Response:
        """GET the namespace (a replayable read) with `token`, presenting `cert` if given."""
        return requests.get(
            self.gw.catalog_url(f"namespaces/{self.gw.ns_path('ns')}"),
            headers={"Authorization": f"Bearer {token}"},
            verify=str(self.pki.ca_cert),
            cert=(str(cert.cert), str(cert.key)) if cert is not None else None,
            timeout=HTTP_TIMEOUT,
        )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("token-assertions")
    pki = make_pki(root / "pki")
    keys = {"k1": _rsa(), "k2": _rsa()}
    corp = KeySetServer(pki).start()
    corp.keys = [_public(keys["k1"], "k1")]
    partner = KeySetServer(pki).start()
    loopback_keys = KeySetServer().start()  # plain http on the gateway's host, same valid keys
    loopback_keys.keys = [_public(keys["k1"], "k1")]
    partner.keys = list(loopback_keys.keys)
    partner.jwks_uri = loopback_keys.keys_url
    policy_dir = bundled_policies(root / "policies", {"alice.cedar": ALICE_READS})
    config = {
        "authz": {"policy_dir": str(policy_dir)},
        "tls": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca_cert),
        },
        "rate_limits": {**GENEROUS_RATE_LIMITS, "auth_failures_per_address": "1000/minute"},
        "oidc": {
            "refresh_min_interval_seconds": REFRESH_INTERVAL,
            "issuers": [
                {"issuer": corp.issuer, "audiences": [AUDIENCE], "alias": "corp"},
                {"issuer": partner.issuer, "audiences": [AUDIENCE], "alias": "partner"},
            ],
        },
    }
    # The gateway must read SSL_CERT_FILE when it imports aiohttp, as a production process does:
    # start it as a plain process rather than a fork of the suite's pre-imported fork server.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(pki.ca_cert))
        patch.setattr("tests.support.gateway.fork_server", lambda: None)
        gw = SecureGateway(root / "gw", pki=pki, config=config).start()
    try:
        gw.create_namespace("ns")
        alice, twin = _own_files(pki, "alice", "alice-1"), _own_files(pki, "alice", "alice-2")
        yield Setup(gw, pki, corp, partner, keys, alice, twin, pki.issue_client("bob"))
    finally:
        gw.stop()
        for server in (corp, partner, loopback_keys):
            server.close()


def _refused(answer: requests.Response) -> str:
    assert answer.status_code == 401, answer.text
    error = answer.json()["error"]
    assert error["type"] == "NotAuthorizedException"
    return str(error["message"])


def test_an_ordinary_token_reads(setup: Setup) -> None:
    token = setup.token()
    for _ in range(3):  # verified, then remembered: the same answer each time
        assert setup.read(token).status_code == 200


def test_a_ten_year_token_is_refused(setup: Setup) -> None:
    now = int(time.time())
    assert _refused(setup.read(setup.token(exp=now + 10 * 365 * 86400))) == "Not authorized"
    # Without iat, the distance from now alone decides; a token within the day still reads.
    assert _refused(setup.read(setup.token(iat=None, exp=now + 3 * 86400))) == "Not authorized"
    assert setup.read(setup.token(exp=now + 20 * 3600)).status_code == 200


def test_a_remembered_token_ends_when_its_key_leaves_the_key_set(setup: Setup) -> None:
    old = setup.token("k1")
    for _ in range(3):  # verified once, then answered from the cache and the read plan
        assert setup.read(old).status_code == 200
    setup.corp.keys = [_public(setup.keys["k2"], "k2")]  # rotation: k2 in, k1 withdrawn
    time.sleep(REFRESH_INTERVAL + 0.2)
    new = setup.token("k2")
    assert setup.read(new).status_code == 200  # control: the unknown kid fetched the new set
    _refused(setup.read(old))  # the remembered verification went with its key
    _refused(setup.read(setup.token("k1")))
    assert setup.read(new).status_code == 200
    setup.corp.keys = [_public(setup.keys["k1"], "k1"), _public(setup.keys["k2"], "k2")]
    time.sleep(REFRESH_INTERVAL + 0.2)


def test_a_certificate_bound_token_needs_its_certificate(setup: Setup) -> None:
    bound = setup.token(cnf={"x5t#S256": _thumbprint(setup.alice_cert)})
    _refused(setup.read(bound))  # no certificate: not a bearer token
    _refused(setup.read(bound, setup.bob_cert))  # another verified certificate
    _refused(setup.read(bound, setup.alice_twin))  # the same subject is not the same certificate
    for _ in range(3):  # control: with its certificate, again and again (remembered)
        assert setup.read(bound, setup.alice_cert).status_code == 200
    # Remembered (cache, read plans keyed by subject) for alice's connection, refused on others.
    _refused(setup.read(bound, setup.alice_twin))
    _refused(setup.read(bound, setup.bob_cert))
    _refused(setup.read(bound))
    assert setup.read(bound, setup.alice_cert).status_code == 200


def test_unsupported_bindings_are_refused(setup: Setup) -> None:
    dpop = setup.token(cnf={"jkt": base64.urlsafe_b64encode(b"\1" * 32).rstrip(b"=").decode()})
    message = _refused(setup.read(dpop, setup.alice_cert))
    assert "DPoP-bound tokens are not supported" in message
    thumbprint = _thumbprint(setup.alice_cert)
    for cnf in ({"x5t#S256": thumbprint, "jwk": {"kty": "RSA"}}, {"kid": "k"}, {}, "bound"):
        assert _refused(setup.read(setup.token(cnf=cnf), setup.alice_cert)) == "Not authorized"


def test_an_https_issuers_keys_do_not_come_over_http(setup: Setup) -> None:
    token = setup.token(issuer=setup.partner)
    _refused(setup.read(token))
    log = setup.gw.log_text()
    assert "jwks_uri" in log
    assert setup.partner.jwks_uri is not None
    assert setup.partner.jwks_uri in log  # the refused URL is named for the operator
    # Control: served over https, the same key set is used.
    setup.partner.jwks_uri = None
    time.sleep(REFRESH_INTERVAL + 0.2)
    answer = setup.read(setup.token(issuer=setup.partner))
    assert answer.status_code == 404, answer.text  # verified now; partner's alice has no grant
    assert answer.json()["error"]["type"] == "NoSuchNamespaceException"
