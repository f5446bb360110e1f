"""Every credential form reaches the replayed read path (`gateway.web.replay`), and a credential
that stops being good is refused at once on that path (issue 32, §0).

Forms: a gateway token, an API key as the bearer token (pyiceberg's `token=`, DuckDB's `TOKEN`),
an API key in `X-Api-Key`, and a token from a configured OIDC issuer. For each, the second
identical read is answered from the plan the first one recorded (`PlanCache.replayed`, and no
second Argon2 verification: `ApiKeyAuthenticator.hash_count`).

Attack tests: a reader keeps repeating a read whose plan exists after its API key was revoked,
rotated, expired, revoked by another process, or after its OIDC token expired; each is refused
(or verified afresh) exactly when a fresh authentication would refuse it. Controls: the same reads
before the change, and other credentials after it, are served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.key_store import connect_key_store
from cedarberg.gateway.web.keys import SECURITY
from cedarberg.gateway.web.replay import PlanCache, credential_digest
from tests.gateway.web.conftest import InProcessGateway, MakeGateway, bearer
from tests.support.idp import KeySetServer

TABLE = "/v1/namespaces/shared/tables/t"
AUDIENCE = "cedarberg"
FORMS = ("gateway-token", "api-key-bearer", "x-api-key", "oidc-jwt")


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def issuer(signing_key: rsa.RSAPrivateKey) -> Iterator[KeySetServer]:
    """An OIDC issuer on loopback whose key the test signs with."""
    server = KeySetServer().start()
    public = RSAAlgorithm.to_jwk(signing_key.public_key(), as_dict=True)
    server.keys = [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]
    try:
        yield server
    finally:
        server.close()


def _oidc_token(issuer: KeySetServer, key: rsa.RSAPrivateKey, lifetime: float = 300) -> str:
    now = int(time.time())
    claims = {
        "iss": issuer.issuer,
        "aud": AUDIENCE,
        "sub": "olga",
        "groups": ["analysts"],
        "iat": now,
        "exp": now + lifetime,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


async def _gateway(
    make_gateway: MakeGateway, issuer: KeySetServer, config: dict[str, Any] | None = None
) -> InProcessGateway:
    oidc = {"issuers": [{"issuer": issuer.issuer, "audiences": [AUDIENCE], "groups_allowed": ["analysts"]}]}
    # Registry reads are kept for a minute, so that a plan here ends by what the test changes
    # about the credential, never by the registry cache's age.
    base = {"rate_limits": {"enabled": False}, "oidc": oidc, "cache": {"registry_ttl_seconds": 60}}
    gw = await make_gateway(anonymous=False, config={**base, **(config or {})})
    root = gw.as_("root")
    await gw.create_namespace("shared", {"cedarberg.readers": "analysts"}, root)
    await gw.create_table("shared", "t", root)
    return gw


async def _token_for(gw: InProcessGateway, key: str) -> str:
    key_id, secret = key.removeprefix("cbk_").split("_", 1)
    answer = await gw.client.post(
        "/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": secret},
    )
    assert answer.status == 200, await answer.text()
    return str((await answer.json())["access_token"])


async def _headers(
    gw: InProcessGateway, form: str, issuer: KeySetServer, key: rsa.RSAPrivateKey, api_key: str
) -> dict[str, str]:
    if form == "gateway-token":
        return bearer(await _token_for(gw, api_key))
    if form == "api-key-bearer":
        return bearer(api_key)
    if form == "x-api-key":
        return {"X-Api-Key": api_key}
    return bearer(_oidc_token(issuer, key))


def _plans(gw: InProcessGateway) -> PlanCache:
    return gw.app[SECURITY].plans


def _keys(gw: InProcessGateway) -> ApiKeyAuthenticator:
    return gw.app[SECURITY].bearer.api_keys


async def _status(gw: InProcessGateway, headers: dict[str, str]) -> int:
    answer = await gw.client.get(TABLE, headers=headers)
    await answer.read()
    return answer.status


def _key_id(api_key: str) -> str:
    return api_key.removeprefix("cbk_").split("_", 1)[0]


@pytest.mark.parametrize("form", FORMS)
async def test_the_second_identical_read_is_replayed_whatever_the_credential_form(
    make_gateway: MakeGateway, issuer: KeySetServer, signing_key: rsa.RSAPrivateKey, form: str
) -> None:
    gw = await _gateway(make_gateway, issuer)
    headers = await _headers(gw, form, issuer, signing_key, gw.keys["ana"])
    plans, keys = _plans(gw), _keys(gw)
    first = await gw.client.get(TABLE, headers=headers)
    assert first.status == 200, await first.text()
    hashes = keys.hash_count
    assert (plans.recorded, plans.replayed) == (1, 0)
    second = await gw.client.get(TABLE, headers=headers)
    assert second.status == 200
    assert (plans.recorded, plans.replayed) == (1, 1)
    assert await second.read() == await first.read()
    assert second.headers["ETag"] == first.headers["ETag"]
    assert keys.hash_count == hashes  # nothing verified again
    decisions = [r for r in await gw.audit() if r["event"] == "decision" and r["action"] == "loadTable"]
    expected = "oidc:" + issuer.issuer + "/olga" if form == "oidc-jwt" else "key:ana"
    assert [r["principal"] for r in decisions] == [expected, expected]


@pytest.mark.parametrize("form", FORMS)
async def test_plans_hold_no_credential(
    make_gateway: MakeGateway, issuer: KeySetServer, signing_key: rsa.RSAPrivateKey, form: str
) -> None:
    gw = await _gateway(make_gateway, issuer)
    headers = await _headers(gw, form, issuer, signing_key, gw.keys["ana"])
    assert [await _status(gw, headers) for _ in range(2)] == [200, 200]
    held = repr(list(_plans(gw)._plans))
    credential = next(iter(headers.values())).removeprefix("Bearer ")
    assert len(_plans(gw)) == 1
    assert credential not in held
    assert _key_id(gw.keys["ana"]) not in held
    assert credential.split(".")[-1][:20] not in held  # not even a token's signature, or a secret's start


@pytest.mark.parametrize("form", ["api-key-bearer", "x-api-key"])
@pytest.mark.parametrize("change", ["revoke", "rotate"])
async def test_a_revoked_or_rotated_api_key_is_refused_at_once_on_the_replayed_path(
    make_gateway: MakeGateway, issuer: KeySetServer, signing_key: rsa.RSAPrivateKey, form: str, change: str
) -> None:
    gw = await _gateway(make_gateway, issuer)
    ana = await _headers(gw, form, issuer, signing_key, gw.keys["ana"])
    other = await _headers(gw, form, issuer, signing_key, gw.keys["root"])
    assert [await _status(gw, ana) for _ in range(2)] == [200, 200]  # control: recorded, replayed
    assert [await _status(gw, other) for _ in range(2)] == [200, 200]
    assert _plans(gw).replayed == 2
    root = gw.as_("root")
    path = f"/admin/v1/api-keys/{_key_id(gw.keys['ana'])}"
    if change == "revoke":
        answer = await gw.client.delete(path, headers=root)
    else:
        answer = await gw.client.post(f"{path}/rotate", headers=root)
    assert answer.status == 200, await answer.text()
    assert [await _status(gw, ana) for _ in range(2)] == [401, 401]
    assert _plans(gw).replayed == 2
    assert await _status(gw, other) == 200  # control: another key's plan still holds
    assert _plans(gw).replayed == 3


async def test_a_rotation_overlap_serves_the_old_secret_until_it_ends_and_not_after(
    make_gateway: MakeGateway, issuer: KeySetServer
) -> None:
    gw = await _gateway(make_gateway, issuer)
    old = bearer(gw.keys["ana"])
    assert [await _status(gw, old) for _ in range(2)] == [200, 200]
    answer = await gw.client.post(
        f"/admin/v1/api-keys/{_key_id(gw.keys['ana'])}/rotate",
        json={"overlap_seconds": 6},  # long enough for two Argon2 verifications on a busy machine
        headers=gw.as_("root"),
    )
    assert answer.status == 200, await answer.text()
    rotated = await answer.json()
    until = datetime.fromisoformat(rotated["previous_secret_expires_at"]).timestamp()
    # The change feed brings this process its own rotation once more (evicting the key's cached
    # verifications again): let that happen now, not in the middle of the reads below.
    await _keys(gw).poll_changes()
    replayed = _plans(gw).replayed
    # In the window: verified once more (against the previous secret), then replayed again.
    assert [await _status(gw, old) for _ in range(3)] == [200, 200, 200]
    assert _plans(gw).replayed == replayed + 2
    new = bearer(rotated["key"])
    assert await _status(gw, new) == 200  # control: the new secret
    await asyncio.sleep(max(0.0, until + 0.1 - time.time()))
    assert [await _status(gw, old) for _ in range(2)] == [401, 401]
    assert _plans(gw).replayed == replayed + 2
    assert [await _status(gw, new) for _ in range(2)] == [200, 200]


async def test_an_api_keys_plan_ends_when_the_key_expires(
    make_gateway: MakeGateway, issuer: KeySetServer
) -> None:
    gw = await _gateway(make_gateway, issuer)
    expires = datetime.now(UTC) + timedelta(seconds=6)  # time for an Argon2 verification on a busy machine
    created = await gw.client.post(
        "/admin/v1/api-keys",
        json={
            "principal": "brief",
            "kind": "service",
            "groups": ["analysts"],
            "expires_at": expires.isoformat(),
        },
        headers=gw.as_("root"),
    )
    assert created.status == 201, await created.text()
    brief, lasting = {"X-Api-Key": (await created.json())["key"]}, {"X-Api-Key": gw.keys["ana"]}
    assert [await _status(gw, brief) for _ in range(2)] == [200, 200]
    assert [await _status(gw, lasting) for _ in range(2)] == [200, 200]
    assert _plans(gw).replayed == 2
    await asyncio.sleep(max(0.0, expires.timestamp() + 0.1 - time.time()))
    assert [await _status(gw, brief) for _ in range(2)] == [401, 401]
    assert _plans(gw).replayed == 2
    assert await _status(gw, lasting) == 200  # control: a key without an expiry is still replayed
    assert _plans(gw).replayed == 3


async def test_a_revocation_by_another_process_ends_the_plan_with_the_next_feed_poll(
    make_gateway: MakeGateway, issuer: KeySetServer
) -> None:
    gw = await _gateway(make_gateway, issuer, {"api_keys": {"change_poll_seconds": 60}})
    ana = bearer(gw.keys["ana"])
    assert [await _status(gw, ana) for _ in range(2)] == [200, 200]
    store = connect_key_store(gw.settings.effective_store_url())
    try:
        await ApiKeyAuthenticator(store).revoke_key(_key_id(gw.keys["ana"]))
    finally:
        await store.close()
    # Not polled yet: the documented bound (`api_keys.change_poll_seconds`), as for a cached key.
    assert await _status(gw, ana) == 200
    assert _plans(gw).replayed == 2
    assert await _keys(gw).poll_changes() == 1
    assert [await _status(gw, ana) for _ in range(2)] == [401, 401]
    assert _plans(gw).replayed == 2


async def test_an_api_keys_plan_lives_no_longer_than_its_cached_verification(
    make_gateway: MakeGateway, issuer: KeySetServer
) -> None:
    gw = await _gateway(make_gateway, issuer, {"api_keys": {"cache_ttl_seconds": 1}})
    ana, keys, plans = {"X-Api-Key": gw.keys["ana"]}, _keys(gw), _plans(gw)
    assert [await _status(gw, ana) for _ in range(2)] == [200, 200]
    hashes = keys.hash_count
    assert (plans.recorded, plans.replayed) == (1, 1)
    await asyncio.sleep(1.1)
    assert [await _status(gw, ana) for _ in range(2)] == [200, 200]
    assert keys.hash_count == hashes + 1  # verified again in full (store and Argon2), once
    assert (plans.recorded, plans.replayed) == (2, 2)


async def test_an_api_key_verified_without_its_cache_is_never_replayed(
    make_gateway: MakeGateway, issuer: KeySetServer
) -> None:
    """With `api_keys.cache_size = 0` every request verifies the key in full: so does every read."""
    gw = await _gateway(make_gateway, issuer, {"api_keys": {"cache_size": 0}})
    ana, keys = bearer(gw.keys["ana"]), _keys(gw)
    hashes = keys.hash_count
    assert [await _status(gw, ana) for _ in range(3)] == [200, 200, 200]
    assert keys.hash_count == hashes + 3
    assert (_plans(gw).recorded, _plans(gw).replayed) == (0, 0)


async def test_an_expired_oidc_token_is_refused_at_once_on_the_replayed_path(
    make_gateway: MakeGateway, issuer: KeySetServer, signing_key: rsa.RSAPrivateKey
) -> None:
    gw = await _gateway(make_gateway, issuer)
    brief = bearer(_oidc_token(issuer, signing_key, lifetime=2))
    lasting = bearer(_oidc_token(issuer, signing_key))
    assert [await _status(gw, brief) for _ in range(2)] == [200, 200]
    assert [await _status(gw, lasting) for _ in range(2)] == [200, 200]
    assert (_plans(gw).recorded, _plans(gw).replayed) == (2, 2)
    await asyncio.sleep(2.2)
    # Decided afresh each time (the verifier's clock leeway may still accept it; a plan never
    # outlives `exp`), and no plan is kept past the expiry.
    for _ in range(2):
        await _status(gw, brief)
    assert (_plans(gw).recorded, _plans(gw).replayed) == (2, 2)
    assert await _status(gw, lasting) == 200  # control
    assert _plans(gw).replayed == 3


def test_the_credential_digest_tells_every_pair_of_headers_apart() -> None:
    """Plans are keyed by this digest: two requests may share a plan only by sending the same
    `Authorization` and `X-Api-Key` values, however the values are split between the headers."""
    pairs = [
        ("a", ""),
        ("", "a"),
        ("a", "b"),
        ("ab", ""),
        ("", "ab"),
        ("k1:ab", ""),
        ("a", "ab"),
        ("aa", "b"),
    ]
    digests = [credential_digest(authorization, api_key) for authorization, api_key in pairs]
    assert len(set(digests)) == len(pairs)
    assert credential_digest("", "") == b""  # no credential: the anonymous principal's plans
    assert credential_digest("a", "b") == credential_digest("a", "b")
