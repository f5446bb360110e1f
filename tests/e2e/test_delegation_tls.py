"""An engine acts for its users only with the certificate its delegation policy names.

A real gateway over TLS with client-certificate verification: the `actAs` permit names the Trino
coordinator's key AND its certificate subject (`context.tls_subject`), as policies/README.md
advises. The same key without a certificate, or with a certificate whose subject only resembles
the trusted one, may not act for anyone; with it, the exchange succeeds, and the refresh, made on
the refresh request's own connection, needs the certificate again.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest
import requests

from tests.support.gateway import bundled_policies
from tests.support.secure import AMBIENT_CA_VARIABLES, SecureGateway
from tests.support.tls import ClientCert, make_pki

TIMEOUT = 30
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TYPE = "urn:ietf:params:oauth:token-type:access_token"
COORDINATOR_CN = "trino-coordinator"


def _policies(subject: str) -> str:
    return f"""
@id("trino-with-its-certificate-acts-for-directory-users")
permit (principal == Cedarberg::Service::"key:trino", action == Cedarberg::Action::"actAs", resource)
when {{ context has tls_subject && context.tls_subject == "{subject}" }};
"""


def _subject(user: str) -> str:
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()

    claims = {"sub": user, "iss": "476", "iat": int(time.time()), "user": user, "trinoCatalog": "lake"}
    return f"{part({'alg': 'none'})}.{part(claims)}."


@dataclass
class Setup:
    gateway: SecureGateway
    key: str
    coordinator: ClientCert
    lookalike: ClientCert

    def post(self, form: dict[str, str], cert: ClientCert | None) -> requests.Response:
        session = self.gateway.session()
        if cert is not None:
            session.cert = (str(cert.cert), str(cert.key))
        return session.post(self.gateway.token_url, data=form, timeout=TIMEOUT)

    def exchange(self, cert: ClientCert | None) -> requests.Response:
        actor = self.gateway.token(self.key)
        form = {
            "grant_type": EXCHANGE,
            "subject_token": _subject("alice"),
            "subject_token_type": JWT_TYPE,
            "actor_token": actor,
            "actor_token_type": ACCESS_TYPE,
            "scope": "catalog",
        }
        return self.post(form, cert)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("delegation-tls")
    pki = make_pki(base / "pki")
    coordinator = pki.issue_client(COORDINATOR_CN, organizational_unit="Data Platform")
    lookalike = pki.issue_client(COORDINATOR_CN + "-dev", organizational_unit="Data Platform")
    policies = bundled_policies(base / "policies", {"delegation.cedar": _policies(coordinator.subject)})
    config = {
        "tls": {
            "cert_file": str(pki.server_cert),
            "key_file": str(pki.server_key),
            "client_ca_file": str(pki.ca_cert),
        },
        "authz": {"policy_dir": str(policies)},
    }
    with pytest.MonkeyPatch.context() as env, SecureGateway(base / "gw", pki=pki, config=config) as gateway:
        for name in AMBIENT_CA_VARIABLES:
            env.delenv(name, raising=False)
        gateway.admin.put(
            f"{gateway.url}/admin/v1/users/alice", json={"groups": ["analysts"]}, timeout=TIMEOUT
        )
        yield Setup(gateway, gateway.create_key("trino", ["engines"]), coordinator, lookalike)


def test_the_engine_with_its_certificate_acts_for_a_listed_user_and_refreshes_with_it(setup: Setup) -> None:
    answer = setup.exchange(setup.coordinator)
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    refresh = {"grant_type": EXCHANGE, "subject_token": token, "subject_token_type": ACCESS_TYPE}
    renewed = setup.post(refresh, setup.coordinator)
    assert renewed.status_code == 200, renewed.text
    without = setup.post(refresh, None)  # the same token, refreshed from a connection without it
    assert without.status_code == 400, without.text
    assert without.json()["error"] == "unauthorized_client"


@pytest.mark.parametrize("cert", [None, "lookalike"])
def test_the_engines_key_without_its_certificate_acts_for_nobody(setup: Setup, cert: str | None) -> None:
    answer = setup.exchange(setup.lookalike if cert else None)
    assert answer.status_code == 400, answer.text
    assert answer.json() == {
        "error": "unauthorized_client",
        "error_description": "the actor may not act for this user",
    }
