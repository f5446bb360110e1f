"""What an OIDC issuer may assert as groups (`gateway.authn.groups`), and its settings.

The same rules through a real identity provider and a real gateway: tests/e2e/test_issuer_groups.py;
through `OidcAuthenticator` with signed tokens: tests/gateway/test_oidc.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cedarberg.gateway.authn.groups import GroupsClaimError, IssuerGroupScope, asserted_groups
from cedarberg.gateway.authn.principal import PRIVILEGED_GROUPS
from cedarberg.gateway.config.authn import OidcIssuerSettings

BUNDLED_POLICIES = Path(__file__).resolve().parents[2] / "policies"


def _issuer(**groups: Any) -> OidcIssuerSettings:
    return OidcIssuerSettings(issuer="https://idp.example", audiences=["cedarberg"], alias="corp", **groups)


def test_privileged_groups_are_the_groups_the_bundled_policies_empower() -> None:
    # One definition of "privileged": every group a bundled policy names as an entity (admins may
    # do everything and pass the guards, monitoring reads /metrics). A bundled policy that starts
    # naming another group must make it privileged too, or issuers could assert it bare by `*`.
    named = {
        match
        for path in BUNDLED_POLICIES.glob("*.cedar")
        for line in path.read_text().splitlines()
        if not line.lstrip().startswith("//")
        for match in re.findall(r'Group::"([^"]+)"', line)
    }
    assert named == PRIVILEGED_GROUPS


@pytest.mark.parametrize(
    ("claim", "separator", "expected"),
    [
        (None, None, set()),
        ("ops\u00a0admins", None, {"ops\u00a0admins"}),  # one group: no Unicode whitespace split
        ("readers, writers", None, {"readers, writers"}),
        ("readers writers", " ", {"readers", "writers"}),
        ("readers\u00a0writers", " ", {"readers\u00a0writers"}),  # exactly the separator, nothing else
        ("a||b||", "||", {"a", "b"}),
        (["a b", "", "c"], " ", {"a b", "c"}),  # a list is never split; empty names dropped
        ("", None, set()),
    ],
)
def test_claims_are_read_as_configured(claim: object, separator: str | None, expected: set[str]) -> None:
    assert asserted_groups(claim, separator) == frozenset(expected)


@pytest.mark.parametrize("claim", [7, True, {"a": 1}, ["a", 1], [["a"]]])
def test_other_claim_types_refuse_the_token(claim: object) -> None:
    with pytest.raises(GroupsClaimError):
        asserted_groups(claim, None)


def test_by_default_an_issuer_asserts_only_its_scoped_groups() -> None:
    scope = IssuerGroupScope.of(_issuer())
    assert scope.groups({"admins", "analysts"}) == {"corp/admins", "corp/analysts"}


def test_the_wildcard_never_admits_privileged_or_scoped_names() -> None:
    scope = IssuerGroupScope.of(_issuer(groups_allowed=["*"]))
    asserted = {"analysts", "admins", "monitoring", "partner/analysts"}
    assert scope.groups(asserted) == {
        "corp/analysts",
        "corp/admins",
        "corp/monitoring",
        "corp/partner/analysts",
        "analysts",
    }


def test_allow_lists_admit_exactly_what_they_name() -> None:
    scope = IssuerGroupScope.of(_issuer(groups_allowed=["analysts"], privileged_groups_allowed=["admins"]))
    assert scope.groups({"analysts", "etl", "admins", "monitoring"}) == {
        "corp/analysts",
        "corp/etl",
        "corp/admins",
        "corp/monitoring",
        "analysts",
        "admins",
    }


def test_the_issuer_url_scopes_groups_when_there_is_no_alias() -> None:
    settings = OidcIssuerSettings(issuer="https://idp.example/realms/a", audiences=["cedarberg"])
    assert IssuerGroupScope.of(settings).groups({"bi"}) == {"https://idp.example/realms/a/bi"}


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"groups_allowed": ["admins"]}, "privileged"),
        ({"groups_allowed": ["analysts", "monitoring"]}, "privileged"),
        ({"groups_allowed": ["partner/analysts"]}, "without '/'"),
        ({"groups_allowed": [""]}, "non-empty"),
        ({"privileged_groups_allowed": ["analysts"]}, "not privileged"),
        ({"groups_separator": ""}, "at least 1 character"),
    ],
)
def test_settings_refuse_what_would_widen_an_issuer(groups: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _issuer(**groups)


def test_settings_keep_explicit_allow_lists() -> None:
    settings = _issuer(groups_allowed=["*", "bi", "bi"], privileged_groups_allowed=["monitoring"])
    assert (settings.groups_allowed, settings.privileged_groups_allowed) == (("*", "bi"), ("monitoring",))
    default = _issuer()
    assert (default.groups_allowed, default.privileged_groups_allowed, default.groups_separator) == (
        (),
        (),
        None,
    )
