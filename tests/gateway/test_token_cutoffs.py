"""Token cut-off: rotating or revoking an API key ends every gateway token issued for it before,
in every process (through the change feed), and token exchange of such a token is refused.

Two `ApiKeyAuthenticator`s on one database stand for two gateway processes; the real gateway
processes are exercised in tests/e2e/test_token_cutoffs.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.key_format import parse_api_key
from cedarberg.gateway.authn.key_store import KeyStore, open_key_store
from cedarberg.gateway.authn.oauth import (
    ACCESS_TOKEN_TYPE,
    GRANT_TOKEN_EXCHANGE,
    OAuthError,
    TokenEndpoint,
    TokenResponse,
)
from cedarberg.gateway.authn.principal import PrincipalKind
from cedarberg.gateway.authn.tokens import TokenIssuer
from cedarberg.gateway.config.authn import ApiKeySettings, TokenSettings


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[KeyStore]:
    key_store = await open_key_store(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}")
    yield key_store
    await key_store.close()


@pytest.fixture
def issuer(tmp_path: Path) -> TokenIssuer:
    return TokenIssuer.open(TokenSettings(), tmp_path)


def _credentials(plaintext: str) -> dict[str, str]:
    parsed = parse_api_key(plaintext)
    return {"grant_type": "client_credentials", "client_id": parsed.key_id, "client_secret": parsed.secret}


def _exchange(token: str) -> dict[str, str]:
    return {
        "grant_type": GRANT_TOKEN_EXCHANGE,
        "subject_token": token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
    }


async def _token(endpoint: TokenEndpoint, form: dict[str, str]) -> str:
    result = await endpoint.handle(form, None)
    assert isinstance(result, TokenResponse), result
    return result.access_token


async def _usable(keys: ApiKeyAuthenticator, issuer: TokenIssuer, token: str) -> bool:
    """What `BearerAuthenticator.authenticate` does with a gateway token."""
    try:
        await keys.check_token(issuer.verify(token))
    except AuthenticationError:
        return False
    return True


@pytest.mark.parametrize("change", ["rotate", "revoke"])
async def test_a_change_elsewhere_ends_earlier_tokens_within_one_poll(
    store: KeyStore, issuer: TokenIssuer, change: str
) -> None:
    here = ApiKeyAuthenticator(store, ApiKeySettings(change_poll_seconds=60))
    elsewhere = ApiKeyAuthenticator(store)
    record, plaintext = await elsewhere.create_key("etl", PrincipalKind.SERVICE, ["writers"])
    _, other_key = await elsewhere.create_key("other", PrincipalKind.SERVICE, ["writers"])
    await here.start_change_feed()
    try:
        endpoint = TokenEndpoint(here, issuer)
        old = await _token(endpoint, _credentials(plaintext))
        other = await _token(endpoint, _credentials(other_key))
        assert await _usable(here, issuer, old)
        if change == "rotate":
            _, new_key = await elsewhere.rotate_key(record.key_id)
        else:
            await elsewhere.revoke_key(record.key_id)
        # Token exchange reads the store: refused at once, before any poll.
        refused = await endpoint.handle(_exchange(old), None)
        assert isinstance(refused, OAuthError)
        assert refused.error == "invalid_request"
        assert await _usable(here, issuer, old)  # not polled yet: the documented bound
        await here.poll_changes()
        assert not await _usable(here, issuer, old)
        assert not await _usable(elsewhere, issuer, old)  # the process that made the change
        # Control: other keys' tokens, and tokens from the new secret, keep working.
        assert await _usable(here, issuer, other)
        assert isinstance(await endpoint.handle(_exchange(other), None), TokenResponse)
        if change == "rotate":
            fresh = await _token(endpoint, _credentials(new_key))
            assert await _usable(here, issuer, fresh)
            refreshed = await _token(endpoint, _exchange(fresh))
            assert await _usable(here, issuer, refreshed)
            assert issuer.verify(refreshed).key_generation == 1
    finally:
        await here.aclose()


async def test_a_process_started_after_the_change_knows_the_cut_off(
    store: KeyStore, issuer: TokenIssuer
) -> None:
    first = ApiKeyAuthenticator(store)
    record, plaintext = await first.create_key("etl", PrincipalKind.SERVICE)
    old = await _token(TokenEndpoint(first, issuer), _credentials(plaintext))
    await first.rotate_key(record.key_id)
    later = ApiKeyAuthenticator(store, ApiKeySettings(change_poll_seconds=60))
    await later.start_change_feed()  # reads the retained feed
    try:
        assert not await _usable(later, issuer, old)
    finally:
        await later.aclose()


async def test_a_stale_feed_asks_the_store(store: KeyStore, issuer: TokenIssuer) -> None:
    here = ApiKeyAuthenticator(store, ApiKeySettings(change_poll_seconds=0.1))
    elsewhere = ApiKeyAuthenticator(store)
    record, plaintext = await elsewhere.create_key("etl", PrincipalKind.SERVICE)
    _, other_key = await elsewhere.create_key("other", PrincipalKind.SERVICE)
    await here.start_change_feed()
    await here.aclose()  # the feed stops being read ...
    token = await _token(TokenEndpoint(here, issuer), _credentials(plaintext))
    other = await _token(TokenEndpoint(here, issuer), _credentials(other_key))
    await elsewhere.revoke_key(record.key_id)
    await asyncio.sleep(0.6)  # ... for more than 5 poll intervals: the feed is stale
    assert not await _usable(here, issuer, token)
    assert await _usable(here, issuer, other)


async def test_tokens_carry_the_generation_of_the_key(store: KeyStore, issuer: TokenIssuer) -> None:
    keys = ApiKeyAuthenticator(store)
    record, plaintext = await keys.create_key("etl", PrincipalKind.SERVICE)
    endpoint = TokenEndpoint(keys, issuer)
    assert issuer.verify(await _token(endpoint, _credentials(plaintext))).key_generation == 0
    _, plaintext = await keys.rotate_key(record.key_id)
    _, plaintext = await keys.rotate_key(record.key_id)
    assert (await keys.get_key(record.key_id)).generation == 2
    assert issuer.verify(await _token(endpoint, _credentials(plaintext))).key_generation == 2
