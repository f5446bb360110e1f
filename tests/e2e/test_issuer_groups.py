"""An assertion is trusted only as far as its asserter: groups from two real OIDC issuers, through
a real gateway over TLS.

The organisation's issuer (alias `org`) may assert `analysts` bare and is opted in to `admins`; a
partner's issuer (alias `partner`) is configured with no allow-list and splits a string groups
claim on `,`. Namespace `org_data` grants read to `analysts` (bare: the organisation's analysts and
API keys in that group), namespace `shared` to `partner/analysts` (the partner's analysts, named
in their scoped form). Both issuers are oauth2-mock-server processes minting tokens with the groups
each test asks for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.idp import Oauth2MockServer
from tests.support.secure import HTTP_TIMEOUT, SecureGateway
from tests.support.tls import TestPki

AUDIENCE = "cedarberg"
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


class Lake:
    """The gateway, both issuers, and requests as a token's bearer."""

    def __init__(self, gw: SecureGateway, org: Oauth2MockServer, partner: Oauth2MockServer) -> None:
        self.gw, self.org, self.partner = gw, org, partner

    def token(self, issuer: Oauth2MockServer, subject: str, **groups: str) -> str:
        return issuer.client_credentials(subject, AUDIENCE, **groups)

    def call(self, method: str, url: str, token: str, body: Any = None) -> requests.Response:
        with self.gw.session(token) as session:
            return session.request(method, url, json=body, timeout=HTTP_TIMEOUT)

    def table_url(self, namespace: str) -> str:
        return self.gw.catalog_url(f"namespaces/{namespace}/tables/t")

    @property
    def keys_url(self) -> str:
        return f"{self.gw.url}/admin/v1/api-keys"

    def key_principals(self) -> set[str]:
        listed = self.gw.admin.get(self.keys_url, timeout=HTTP_TIMEOUT)
        assert listed.status_code == 200, listed.text
        return {str(record["principal"]) for record in listed.json()["api-keys"]}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("issuer-groups")
    org, partner = Oauth2MockServer(), Oauth2MockServer()
    org.start()
    try:
        partner.start()
        config = {
            "oidc": {
                "issuers": [
                    {
                        "issuer": org.issuer,
                        "audiences": [AUDIENCE],
                        "alias": "org",
                        "groups_allowed": ["analysts"],
                        "privileged_groups_allowed": ["admins"],
                    },
                    {
                        "issuer": partner.issuer,
                        "audiences": [AUDIENCE],
                        "alias": "partner",
                        "groups_separator": ",",
                    },
                ]
            }
        }
        with SecureGateway(root / "gw", pki=session_pki, config=config) as gw:
            gw.create_namespace("org_data", readers=["analysts"])
            gw.create_namespace("shared", readers=["partner/analysts"])
            for namespace in ("org_data", "shared"):
                created = gw.admin.post(
                    gw.catalog_url(f"namespaces/{namespace}/tables"),
                    json={"name": "t", "schema": SCHEMA},
                    timeout=HTTP_TIMEOUT,
                )
                assert created.status_code == 200, created.text
            yield Lake(gw, org, partner)
    finally:
        partner.close()
        org.close()


def _refused(response: requests.Response, status: int, kind: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["type"] == kind


def test_a_partner_claiming_admins_gets_no_admin_api_and_mints_no_key(lake: Lake) -> None:
    token = lake.token(lake.partner, "mallory", groups="admins")
    _refused(lake.call("GET", lake.keys_url, token), 403, "ForbiddenException")
    minted = lake.call(
        "POST", lake.keys_url, token, {"principal": "backdoor", "kind": "service", "groups": ["admins"]}
    )
    _refused(minted, 403, "ForbiddenException")
    assert "backdoor" not in lake.key_principals()
    # Nor does the partner's `admins` pass a guard or manage namespaces.
    created = lake.call("POST", lake.gw.catalog_url("namespaces"), token, {"namespace": ["mallory"]})
    _refused(created, 403, "ForbiddenException")


def test_the_organisations_opted_in_admins_use_the_admin_api(lake: Lake) -> None:
    token = lake.token(lake.org, "olivia", groups="admins")
    assert lake.call("GET", lake.keys_url, token).status_code == 200
    minted = lake.call(
        "POST", lake.keys_url, token, {"principal": "org-etl", "kind": "service", "groups": ["etl"]}
    )
    assert minted.status_code == 201, minted.text
    assert "org-etl" in lake.key_principals()


def test_a_partners_analysts_cannot_read_the_organisations_analysts_grant(lake: Lake) -> None:
    token = lake.token(lake.partner, "paul", groups="analysts")
    # As if absent: the grant to `analysts` is not the partner's to claim.
    _refused(lake.call("GET", lake.table_url("org_data"), token), 404, "NoSuchTableException")
    listed = lake.call("GET", lake.gw.catalog_url("namespaces"), token)
    assert listed.status_code == 200, listed.text
    assert listed.json()["namespaces"] == [["shared"]]
    # Control: the organisation's analysts read it, through the bare name their issuer may assert.
    assert (
        lake.call(
            "GET", lake.table_url("org_data"), lake.token(lake.org, "ann", groups="analysts")
        ).status_code
        == 200
    )


def test_a_grant_naming_the_partners_scoped_group_admits_its_analysts(lake: Lake) -> None:
    # The partner's string claim, split on its configured separator: `analysts` and `bi`.
    token = lake.token(lake.partner, "paula", groups_string="bi,analysts")
    assert lake.call("GET", lake.table_url("shared"), token).status_code == 200
    # The organisation's analysts are not the partner's: the scoped grant does not admit them.
    org_analyst = lake.token(lake.org, "ann", groups="analysts")
    _refused(lake.call("GET", lake.table_url("shared"), org_analyst), 404, "NoSuchTableException")


def test_a_string_claim_is_one_group_whatever_whitespace_it_holds(lake: Lake) -> None:
    # The organisation's issuer may assert `admins`, but `ops<no-break space>admins` is one group.
    for spelling in ("ops\u00a0admins", "ops admins", "ops,admins"):
        token = lake.token(lake.org, "eve", groups_string=spelling)
        _refused(lake.call("GET", lake.keys_url, token), 403, "ForbiddenException")
    # Control: the same names as a list of two groups do make an admin.
    assert (
        lake.call("GET", lake.keys_url, lake.token(lake.org, "eve", groups="ops admins")).status_code == 200
    )
