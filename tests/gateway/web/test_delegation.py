"""Engines acting for their users (RFC 8693 token exchange with an actor token), over HTTP.

Raw token-exchange forms, as Trino's Iceberg client (`session=USER`) sends them, against the real
application: the actor is an API key's principal (`etl-bot` from the template, standing for the
Trino coordinator, allowed by a test policy), the subject an unsigned JWT built as Trino builds
it. Attacks: actors the policies do not allow (an admin, a stranger's key, no actor at all, a
forged actor token, a delegated user), subjects that are old, signed by nobody, malformed or name
someone outside the directory, a user named like an API key's principal, the actor key rotated or
revoked, refreshes after the user left the directory. Controls: a listed user reads what its
directory groups may read, with the actor in `act`, in `context.via` and in the audit log;
refreshes renew it; `@columns` restrictions bind it.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cedarberg.gateway.authn.key_format import parse_api_key
from tests.gateway.web.conftest import InProcessGateway, MakeGateway, bearer
from tests.support.gateway import bundled_policies

TOKENS = "/v1/oauth/tokens"
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TYPE = "urn:ietf:params:oauth:token-type:access_token"
READ = (
    '[Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan", '
    'Cedarberg::Action::"fetchPlanningResult", Cedarberg::Action::"fetchScanTasks"]'
)
POLICIES = f"""
// The engine `etl-bot` (the Trino coordinator here) may act for users of the directory it names
// with its own unsigned assertion.
@id("etl-bot-acts-for-directory-users")
permit (
  principal == Cedarberg::Service::"key:etl-bot",
  action == Cedarberg::Action::"actAs",
  resource
)
when {{ context.subject_issuer == "unsigned" }};

// Nothing under `hr` is read through etl-bot, whoever it acts for.
@id("no-hr-through-etl-bot")
forbid (principal, action, resource in Cedarberg::Namespace::"default/hr")
when {{ context has via && context.via == "key:etl-bot" }};

@id("auditors-read-people-restricted")
@columns("id")
permit (
  principal in Cedarberg::Group::"auditors",
  action in {READ},
  resource == Cedarberg::Table::"default/payroll/people"
);
"""
SCHEMA: dict[str, Any] = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "salary", "type": "long", "required": False},
    ],
}


def unsigned_subject(name: str, *, issued_at: int | None = None, **claims: object) -> str:
    """An unsigned JWT exactly as Trino 476 builds it (`TrinoRestCatalog.convert`, jjwt, `alg:
    none`): `sub`, `iss` (the Trino version), `iat`, then the session's properties."""
    now = int(time.time()) if issued_at is None else issued_at
    body: dict[str, object] = {
        "sub": name,
        "iss": "476",
        "iat": now,
        "user": name,
        "source": "trino-cli",
        "trinoCatalog": "lake",
        "trinoVersion": "476",
    }
    body.update(claims)

    def part(value: object) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(body)}."


def credentials(key: str) -> dict[str, str]:
    parsed = parse_api_key(key)
    return {"grant_type": "client_credentials", "client_id": parsed.key_id, "client_secret": parsed.secret}


async def token_for(gw: InProcessGateway, key: str) -> str:
    answer = await gw.client.post(TOKENS, data=credentials(key))
    assert answer.status == 200, await answer.text()
    token: str = (await answer.json())["access_token"]
    return token


async def exchange(
    gw: InProcessGateway, subject: str, actor: str | None, subject_type: str = JWT_TYPE
) -> tuple[int, dict[str, Any]]:
    """POST the form Iceberg's `OAuth2Util.exchangeToken` sends: subject, actor, scope."""
    form = {
        "grant_type": EXCHANGE,
        "subject_token": subject,
        "subject_token_type": subject_type,
        "scope": "catalog",
    }
    if actor is not None:
        form |= {"actor_token": actor, "actor_token_type": ACCESS_TYPE}
    headers = bearer(actor) if actor is not None else {}
    answer = await gw.client.post(TOKENS, data=form, headers=headers)
    return answer.status, await answer.json()


async def refresh(gw: InProcessGateway, token: str) -> tuple[int, dict[str, Any]]:
    """The Java client's refresh: the token it holds, exchanged for a fresh one (no actor)."""
    form = {
        "grant_type": EXCHANGE,
        "subject_token": token,
        "subject_token_type": ACCESS_TYPE,
        "scope": "catalog",
    }
    answer = await gw.client.post(TOKENS, data=form, headers=bearer(token))
    return answer.status, await answer.json()


def claims(token: str) -> dict[str, Any]:
    return dict(jwt.decode(token, options={"verify_signature": False}))


@pytest.fixture
async def gw(make_gateway: MakeGateway, tmp_path: Path) -> InProcessGateway:
    policy_dir = bundled_policies(tmp_path / "policies", {"delegation.cedar": POLICIES})
    gateway = await make_gateway(anonymous=False, config={"authz": {"policy_dir": str(policy_dir)}})
    root = gateway.as_("root")
    await gateway.create_namespace("sales", {"cedarberg.readers": "analysts"}, headers=root)
    await gateway.create_table("sales", "orders", headers=root)
    await gateway.create_namespace("hr", {"cedarberg.readers": "analysts"}, headers=root)
    await gateway.create_table("hr", "staff", headers=root)
    await gateway.create_namespace("payroll", headers=root)
    answer = await gateway.client.post(
        "/v1/namespaces/payroll/tables", json={"name": "people", "schema": SCHEMA}, headers=root
    )
    assert answer.status == 200, await answer.text()
    for user, groups in {"alice": ["analysts"], "bob": ["interns"], "root": [], "ida": ["auditors"]}.items():
        listed = await gateway.client.put(f"/admin/v1/users/{user}", json={"groups": groups}, headers=root)
        assert listed.status == 200, await listed.text()
    return gateway


async def delegated(gw: InProcessGateway, user: str, actor_key: str | None = None) -> str:
    actor = await token_for(gw, actor_key or gw.keys["etl-bot"])
    status, body = await exchange(gw, unsigned_subject(user), actor)
    assert status == 200, body
    token: str = body["access_token"]
    return token


async def load(gw: InProcessGateway, token: str, table: str = "sales/tables/orders") -> int:
    namespace, _, name = table.partition("/tables/")
    answer = await gw.client.get(f"/v1/namespaces/{namespace}/tables/{name}", headers=bearer(token))
    return answer.status


# -- controls -------------------------------------------------------------------------------------


async def test_an_allowed_engine_acts_for_a_listed_user_who_reads_with_the_directorys_groups(
    gw: InProcessGateway,
) -> None:
    token = await delegated(gw, "alice")
    issued = claims(token)
    assert issued["sub"] == "user:alice"
    assert issued["act"] == {"sub": "key:etl-bot"}
    assert issued["groups"] == ["analysts"]
    assert await load(gw, token) == 200
    records = await gw.audit()
    granted = [r for r in records if r["action"] == "actAs"]
    assert granted[-1]["decision"] == "allow"
    assert granted[-1]["principal"] == "key:etl-bot"
    assert granted[-1]["resource"] == 'Cedarberg::User::"user:alice"'
    assert granted[-1]["policy_ids"] == ["etl-bot-acts-for-directory-users"]
    assert granted[-1]["request_id"]  # the token request's id, like every decision's
    read = [r for r in records if r["action"] == "loadTable"][-1]
    assert (read["principal"], read["actor"], read["decision"]) == ("user:alice", "key:etl-bot", "allow")


async def test_a_listed_user_without_a_grant_is_refused_its_reads(gw: InProcessGateway) -> None:
    token = await delegated(gw, "bob")
    assert claims(token)["groups"] == ["interns"]
    assert await load(gw, token) in {403, 404}


async def test_a_policy_on_context_via_binds_the_delegated_user_but_not_the_same_groups_directly(
    gw: InProcessGateway,
) -> None:
    token = await delegated(gw, "alice")
    assert await load(gw, token, "hr/tables/staff") in {403, 404}
    assert await load(gw, token, "sales/tables/orders") == 200
    direct = await token_for(gw, gw.keys["ana"])  # an analyst, not through etl-bot
    assert await load(gw, direct, "hr/tables/staff") == 200


async def test_column_restrictions_apply_to_the_delegated_user(gw: InProcessGateway) -> None:
    token = await delegated(gw, "ida")
    answer = await gw.client.get("/v1/namespaces/payroll/tables/people", headers=bearer(token))
    assert answer.status == 200, await answer.text()
    restrictions = (await answer.json())["read-restrictions"]
    assert restrictions["required-column-projections"] == [{"field-id": 2, "action": "replace-with-null"}]


async def test_a_delegated_token_is_refreshed_by_exchanging_it_again(gw: InProcessGateway) -> None:
    token = await delegated(gw, "alice")
    status, body = await refresh(gw, token)
    assert status == 200, body
    fresh = claims(body["access_token"])
    assert (fresh["sub"], fresh["act"]) == ("user:alice", {"sub": "key:etl-bot"})
    assert await load(gw, body["access_token"]) == 200
    decisions = [r for r in await gw.audit() if r["action"] == "actAs"]
    assert decisions[-1]["detail"]["refresh"] is True


async def test_a_group_change_in_the_directory_applies_at_the_next_refresh(gw: InProcessGateway) -> None:
    token = await delegated(gw, "bob")
    changed = await gw.client.put(
        "/admin/v1/users/bob", json={"groups": ["analysts"]}, headers=gw.as_("root")
    )
    assert changed.status == 200
    status, body = await refresh(gw, token)
    assert status == 200, body
    assert await load(gw, body["access_token"]) == 200


async def test_the_issued_token_lives_no_longer_than_the_actor_token(gw: InProcessGateway) -> None:
    actor = await token_for(gw, gw.keys["etl-bot"])
    status, body = await exchange(gw, unsigned_subject("alice"), actor)
    assert status == 200, body
    assert claims(body["access_token"])["exp"] <= claims(actor)["exp"]


# -- attacks: who acts ------------------------------------------------------------------------------


async def test_an_actor_the_policies_do_not_allow_is_refused_and_audited(gw: InProcessGateway) -> None:
    stranger = await token_for(gw, gw.keys["nobody"])
    status, body = await exchange(gw, unsigned_subject("alice"), stranger)
    assert (status, body["error"]) == (400, "unauthorized_client")
    assert body["error_description"] == "the actor may not act for this user"
    denied = [r for r in await gw.audit() if r["action"] == "actAs"][-1]
    assert (denied["principal"], denied["decision"], denied["policy_ids"]) == ("key:nobody", "deny", [])


async def test_admins_may_not_act_for_users_by_default(gw: InProcessGateway) -> None:
    admin = await token_for(gw, gw.keys["root"])
    status, body = await exchange(gw, unsigned_subject("alice"), admin)
    assert (status, body["error"]) == (400, "unauthorized_client")


async def test_an_unsigned_subject_without_an_actor_is_refused(gw: InProcessGateway) -> None:
    status, body = await exchange(gw, unsigned_subject("alice"), None)
    assert (status, body["error"]) == (400, "invalid_request")
    assert "actor_token" in body["error_description"]


async def test_a_forged_actor_token_is_refused_as_a_failed_authentication(gw: InProcessGateway) -> None:
    key = Ed25519PrivateKey.generate()
    now = int(time.time())
    forged = jwt.encode(
        {
            "iss": "cedarberg",
            "aud": "cedarberg",
            "sub": "key:etl-bot",
            "iat": now,
            "nbf": now,
            "exp": now + 60,
        },
        key,
        algorithm="EdDSA",
        headers={"typ": "at+jwt"},
    )
    status, body = await exchange(gw, unsigned_subject("alice"), forged)
    assert (status, body["error"], body["error_description"]) == (
        400,
        "invalid_request",
        "actor_token is not valid",
    )
    status, body = await exchange(gw, unsigned_subject("alice"), unsigned_subject("etl-bot"))
    assert (status, body["error"]) == (400, "invalid_request")


async def test_a_delegated_user_cannot_act_for_anyone_else(gw: InProcessGateway) -> None:
    alice = await delegated(gw, "alice")
    status, body = await exchange(gw, unsigned_subject("bob"), alice)
    assert (status, body["error"]) == (400, "unauthorized_client")


# -- attacks: who for -------------------------------------------------------------------------------


async def test_a_user_outside_the_directory_is_refused_like_a_denial_and_audited(
    gw: InProcessGateway,
) -> None:
    actor = await token_for(gw, gw.keys["etl-bot"])
    status, body = await exchange(gw, unsigned_subject("carol"), actor)
    assert (status, body["error"]) == (400, "unauthorized_client")
    refused = [r for r in await gw.audit() if r["action"] == "actAs"][-1]
    assert refused["resource"] == 'Cedarberg::User::"user:carol"'
    assert refused["detail"] == {"reason": "the user is not in the directory"}


async def test_a_user_named_like_an_admin_key_gets_only_its_directory_groups(gw: InProcessGateway) -> None:
    token = await delegated(gw, "root")  # the directory's `root`, not the API key principal `root`
    assert claims(token)["sub"] == "user:root"
    keys = await gw.client.get("/admin/v1/api-keys", headers=bearer(token))
    assert keys.status == 403


# Each subject is built when its test runs (from the clock then, not at collection): a subject
# made at collection is already too old when the suite reaches it.
@pytest.mark.parametrize(
    ("make_subject", "reason"),
    [
        (lambda now: unsigned_subject("alice", issued_at=now - 3600), "subject_token has expired (too old)"),
        (
            lambda now: unsigned_subject("alice", issued_at=now + 3600),
            "subject_token was issued in the future",
        ),
        (lambda now: unsigned_subject("alice", issued_at=now, exp=now - 60), "subject_token has expired"),
        (
            lambda now: unsigned_subject("alice", issued_at=now, user="root"),
            "subject_token user and sub differ",
        ),
        (
            lambda now: unsigned_subject("ops/alice", issued_at=now),
            "subject_token sub is not a valid user name",
        ),
        (
            lambda now: unsigned_subject("alice", issued_at=now) + "c2lnbmF0dXJl",
            "an unsigned subject_token carries no signature",
        ),
    ],
)
async def test_a_bad_unsigned_subject_is_refused_saying_why(
    gw: InProcessGateway, make_subject: Callable[[int], str], reason: str
) -> None:
    actor = await token_for(gw, gw.keys["etl-bot"])
    status, body = await exchange(gw, make_subject(int(time.time())), actor)
    assert (status, body["error"], body["error_description"]) == (400, "invalid_request", reason)


async def test_a_subject_without_iat_is_refused(gw: InProcessGateway) -> None:
    actor = await token_for(gw, gw.keys["etl-bot"])
    payload = base64.urlsafe_b64encode(orjson.dumps({"sub": "alice"})).rstrip(b"=").decode()
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    status, body = await exchange(gw, f"{header}.{payload}.", actor)
    assert (status, body["error_description"]) == (400, "subject_token must carry iat (an integer)")


# -- attacks: cut-offs ------------------------------------------------------------------------------


async def _own_actor(gw: InProcessGateway) -> tuple[str, str]:
    """A fresh key for `etl-bot` (the policy names the principal): (key id, key)."""
    answer = await gw.client.post(
        "/admin/v1/api-keys", json={"principal": "etl-bot", "kind": "service"}, headers=gw.as_("root")
    )
    assert answer.status == 201, await answer.text()
    body = await answer.json()
    return body["id"], body["key"]


async def test_revoking_the_actor_key_ends_its_delegated_tokens_and_their_refresh(
    gw: InProcessGateway,
) -> None:
    key_id, key = await _own_actor(gw)
    token = await delegated(gw, "alice", key)
    assert await load(gw, token) == 200
    revoked = await gw.client.delete(f"/admin/v1/api-keys/{key_id}", headers=gw.as_("root"))
    assert revoked.status == 200
    assert await load(gw, token) == 401
    status, body = await refresh(gw, token)
    assert (status, body["error"]) == (400, "invalid_request")


async def test_rotating_the_actor_key_ends_its_delegated_tokens(gw: InProcessGateway) -> None:
    key_id, key = await _own_actor(gw)
    token = await delegated(gw, "alice", key)
    rotated = await gw.client.post(f"/admin/v1/api-keys/{key_id}/rotate", headers=gw.as_("root"))
    assert rotated.status == 200
    assert await load(gw, token) == 401
    status, _ = await refresh(gw, token)
    assert status == 400


async def test_a_user_removed_from_the_directory_is_not_refreshed(gw: InProcessGateway) -> None:
    token = await delegated(gw, "alice")
    removed = await gw.client.delete("/admin/v1/users/alice", headers=gw.as_("root"))
    assert removed.status == 204
    status, body = await refresh(gw, token)
    assert (status, body["error"]) == (400, "unauthorized_client")


# -- the directory API ------------------------------------------------------------------------------


async def test_only_admins_change_the_directory(gw: InProcessGateway) -> None:
    analyst = await token_for(gw, gw.keys["ana"])
    answer = await gw.client.put("/admin/v1/users/ana", json={"groups": ["admins"]}, headers=bearer(analyst))
    assert answer.status == 403
    listed = await gw.client.get("/admin/v1/users/ana", headers=gw.as_("root"))
    assert listed.status == 404


async def test_the_directory_lists_reads_and_refuses_bad_input(gw: InProcessGateway) -> None:
    root = gw.as_("root")
    page = await gw.client.get("/admin/v1/users?pageSize=2", headers=root)
    body = await page.json()
    assert [u["name"] for u in body["users"]] == ["alice", "bob"]
    assert body["next-page-token"] == "bob"
    rest = await (await gw.client.get("/admin/v1/users?pageToken=bob", headers=root)).json()
    assert [u["name"] for u in rest["users"]] == ["ida", "root"]
    alice = await (await gw.client.get("/admin/v1/users/alice", headers=root)).json()
    assert alice["groups"] == ["analysts"]
    bad_group = await gw.client.put("/admin/v1/users/x", json={"groups": ["corp/admins"]}, headers=root)
    assert bad_group.status == 400
    assert "group names" in (await bad_group.json())["error"]["message"]
    bad_body = await gw.client.put("/admin/v1/users/x", json={"groups": "admins"}, headers=root)
    assert bad_body.status == 400
    missing = await gw.client.delete("/admin/v1/users/nobody-here", headers=root)
    assert missing.status == 404
