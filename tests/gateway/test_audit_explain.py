"""From an audit record to the explain request that decides it again (gateway/audit_explain.py):
every resource kind the pipeline records, names with escaped characters, and records that have
nothing to explain. Every body is checked against the explain endpoint's own request model."""

from __future__ import annotations

from typing import Any

import pytest

from cedarberg.gateway.audit_explain import explain_body, explained_resource
from cedarberg.gateway.authz.entities import EntityType, EntityUid, namespace_id, object_id
from cedarberg.gateway.web.routes.admin_requests import ExplainRequest

RECORD: dict[str, Any] = {
    "time": "2026-11-27T09:00:00.000Z",
    "stream": "audit",
    "event": "decision",
    "request_id": "0" * 32,
    "principal": "key:analyst",
    "principal_kind": "user",
    "auth_method": "gateway-token",
    "actor": None,
    "client_address": "10.0.0.7",
    "action": "loadTable",
    "resource": 'Cedarberg::Table::"default/shop/orders"',
    "decision": "deny",
    "policy_ids": [],
    "policy_version": "v",
    "outcome": None,
    "status": 404,
    "detail": {"reason": "no policy permits it"},
}


@pytest.mark.parametrize(
    ("uid", "expected"),
    [
        (EntityUid.of(EntityType.CATALOG, "cedarberg"), {"type": "catalog"}),
        (EntityUid.of(EntityType.WAREHOUSE, "w%2Eh"), {"type": "warehouse", "warehouse": "w.h"}),
        (
            EntityUid.of(EntityType.NAMESPACE, namespace_id("default", ["sales", "e.u"])),
            {"type": "namespace", "warehouse": "default", "namespace": ["sales", "e.u"]},
        ),
        (
            EntityUid.of(EntityType.TABLE, object_id("default", ["a/b"], 'or"ders%')),
            {"type": "table", "warehouse": "default", "namespace": ["a/b"], "name": 'or"ders%'},
        ),
        (
            EntityUid.of(EntityType.VIEW, object_id("plain", ["x"], "v")),
            {"type": "view", "warehouse": "plain", "namespace": ["x"], "name": "v"},
        ),
        (EntityUid.of(EntityType.API_KEY, "abcdefghijklmnop"), {"type": "api-key", "id": "abcdefghijklmnop"}),
    ],
)
def test_every_recorded_resource_kind_is_described_back(uid: EntityUid, expected: dict[str, Any]) -> None:
    assert explained_resource(str(uid)) == expected


@pytest.mark.parametrize(
    "uid",
    [
        "Cedarberg::Table::default/shop/orders",  # not quoted
        'Cedarberg::Group::"admins"',  # not a resource
        'Cedarberg::Table::"default/shop"',  # a table without a name
        'Cedarberg::Namespace::"default/shop/orders"',  # a namespace with one
        'Cedarberg::Table::"default/shop/bad%zz"',  # a bad escape
        'Other::Table::"default/shop/orders"',
        "Cedarberg::Table::[1]",
        "Cedarberg::Catalog::1",
    ],
)
def test_what_is_not_a_resource_uid_has_no_description(uid: str) -> None:
    assert explained_resource(uid) is None


def test_a_decision_record_becomes_a_valid_explain_request() -> None:
    body = explain_body(RECORD, ["bi"])
    assert body == {
        "principal": "key:analyst",
        "kind": "user",
        "auth_method": "gateway-token",
        "groups": ["bi"],
        "client_address": "10.0.0.7",
        "action": "loadTable",
        "resource": {"type": "table", "warehouse": "default", "namespace": ["shop"], "name": "orders"},
    }
    ExplainRequest.model_validate(body)  # what the explain endpoint takes, strictly


def test_groups_the_record_states_win_over_those_known_now() -> None:
    body = explain_body({**RECORD, "groups": ["etl"]}, ["bi"])
    assert body is not None
    assert body["groups"] == ["etl"]
    unknown = explain_body(RECORD)
    assert unknown is not None
    assert "groups" not in unknown  # none known: the request model's default, no groups
    ExplainRequest.model_validate(unknown)


@pytest.mark.parametrize(
    "change",
    [
        {"event": "mutation"},
        {"event": "auth_failure", "principal": None},
        {"action": "getToken"},  # public: no Cedar action
        {"action": "noSuchAction"},
        {"principal": None},
        {"principal_kind": "robot"},
        {"auth_method": "password"},
        {"resource": "Cedarberg::Table::[]"},
        {"resource": None},
    ],
)
def test_records_with_nothing_to_explain_have_no_body(change: dict[str, Any]) -> None:
    assert explain_body({**RECORD, **change}) is None


def test_an_address_the_request_model_would_refuse_is_left_out() -> None:
    body = explain_body({**RECORD, "client_address": "x" * 65})
    assert body is not None
    assert "client_address" not in body
    ExplainRequest.model_validate(body)
