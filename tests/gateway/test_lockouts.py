"""API key lockouts count per key id *and* client address, through a real gateway.

Someone who knows a key id (the OAuth2 client id, not a secret) and guesses secrets from one
address locks out only that address for that key: the owner presenting the right secret from
another address is never locked out, on the token endpoint and with the key as a bearer
credential. The token endpoint's failures count toward the per-address failed-authentication
budget like every other route's. Clients take other addresses by binding their sockets to other
loopback addresses (127.0.0.0/8 is all loopback on Linux).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter

from tests.support.gateway import GatewayProcess, bundled_policies
from tests.support.secure import keys_create

TIMEOUT = 30
THRESHOLD = 3
BUDGET = 8  # failed authentications per address and minute


class _SourceAddress(HTTPAdapter):
    """Connects from a chosen local address."""

    def __init__(self, source: str) -> None:
        self._source = source
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self._source, 0)
        super().init_poolmanager(*args, **kwargs)


def _client(source: str) -> requests.Session:
    session = requests.Session()
    adapter = _SourceAddress(source)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


@pytest.fixture
def gateway(tmp_path: Path, fresh_store_url: str | None) -> Iterator[tuple[GatewayProcess, str]]:
    data_dir = tmp_path / "gw"
    policy_dir = tmp_path / "policies"
    bundled_policies(policy_dir)
    admin = keys_create(data_dir, "root", ["admins"], store_url=fresh_store_url)
    gw = GatewayProcess(
        data_dir,
        store_url=fresh_store_url,
        anonymous=False,
        config={
            "authz": {"policy_dir": str(policy_dir)},
            "api_keys": {"lockout_threshold": THRESHOLD},
            "rate_limits": {"auth_failures_per_address": f"{BUDGET}/minute"},
        },
        probe_headers={"Authorization": f"Bearer {admin}"},
    )
    with gw:
        yield gw, admin


def _create_key(gw: GatewayProcess, admin: str, principal: str) -> str:
    answer = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": principal, "kind": "service", "groups": ["readers"]},
        headers={"Authorization": f"Bearer {admin}"},
        timeout=TIMEOUT,
    )
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["key"])


def _wrong(key: str) -> str:
    """The same key id with another well-formed secret (its first character changed: the last
    one also carries padding bits, which a canonical secret must leave zero)."""
    return key[:21] + ("A" if key[21] != "A" else "B") + key[22:]


def _token(session: requests.Session, gw: GatewayProcess, key: str) -> requests.Response:
    form = {"grant_type": "client_credentials", "client_id": key[4:20], "client_secret": key[21:]}
    return session.post(f"{gw.url}/v1/oauth/tokens", data=form, timeout=TIMEOUT)


def _bearer(session: requests.Session, gw: GatewayProcess, key: str) -> requests.Response:
    return session.get(f"{gw.url}/v1/config", headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT)


def test_token_endpoint_guesses_lock_out_only_the_guessers_address(
    gateway: tuple[GatewayProcess, str],
) -> None:
    gw, admin = gateway
    key = _create_key(gw, admin, "etl")
    other = _create_key(gw, admin, "other")
    with _client("127.0.0.2") as guesser, _client("127.0.0.3") as owner:
        for _ in range(THRESHOLD):
            failed = _token(guesser, gw, _wrong(key))
            assert failed.status_code == 401
            assert failed.json()["error"] == "invalid_client"
        # Attack: the guesser's address is locked out of the key, even with the right secret ...
        assert _token(guesser, gw, key).status_code == 401
        assert _bearer(guesser, gw, key).status_code == 401
        # ... and the owner, elsewhere, is not: on the token endpoint and as a bearer key.
        issued = _token(owner, gw, key)
        assert issued.status_code == 200, issued.text
        assert _bearer(owner, gw, issued.json()["access_token"]).status_code == 200
        assert _bearer(owner, gw, key).status_code == 200
        # The token endpoint's failures spend the guesser's per-address budget (five spent so
        # far): past it, the address is refused for every credential, before any is checked.
        for _ in range(BUDGET - THRESHOLD - 2):
            assert _token(guesser, gw, _wrong(other)).status_code == 401
        refused = _token(guesser, gw, other)
        assert refused.status_code == 429
        assert refused.json()["error"] == "temporarily_unavailable"
        assert int(refused.headers["Retry-After"]) >= 1
        assert _bearer(guesser, gw, other).status_code == 429
        assert _bearer(guesser, gw, admin).status_code == 429
        # Control: other addresses authenticate as usual.
        assert _token(owner, gw, other).status_code == 200
        assert _bearer(owner, gw, admin).status_code == 200


def test_bearer_key_guesses_lock_out_only_the_guessers_address(gateway: tuple[GatewayProcess, str]) -> None:
    gw, admin = gateway
    key = _create_key(gw, admin, "etl")
    with _client("127.0.0.4") as guesser, _client("127.0.0.5") as owner:
        for _ in range(THRESHOLD):
            assert _bearer(guesser, gw, _wrong(key)).status_code == 401
        assert _bearer(guesser, gw, key).status_code == 401  # locked out here
        assert _token(guesser, gw, key).status_code == 401
        assert _bearer(owner, gw, key).status_code == 200  # never there
        assert _token(owner, gw, key).status_code == 200
        # Once the owner's verification is cached, the right key works from anywhere.
        assert _bearer(guesser, gw, key).status_code == 200


def test_normal_authentication_is_unaffected(gateway: tuple[GatewayProcess, str]) -> None:
    gw, admin = gateway
    key = _create_key(gw, admin, "etl")
    with _client("127.0.0.6") as client:
        for _ in range(BUDGET + 2):  # successes spend no failure budget
            assert _token(client, gw, key).status_code == 200
            assert _bearer(client, gw, key).status_code == 200
