"""Key rotation with an overlap window, on a real gateway process (plain HTTP on loopback).

`POST /admin/v1/api-keys/{id}/rotate` with `{"overlap_seconds": N}` keeps the old secret working
for N seconds, then it stops; so do the gateway tokens it proved (issued before the rotation or
with the old secret during the window). A second rotation ends the first old secret; a revocation
ends both; an overlap above `api_keys.max_rotation_overlap_seconds` is a 400. Each test uses keys
of its own, so the per-key lockout (5 failures of one key from one address) never interferes.
The same rules across two gateway processes: tests/e2e/test_token_cutoffs.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import requests

from tests.support.gateway import GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create, split_key

TIMEOUT = 30
MAX_OVERLAP = 30
WINDOW = 6  # seconds: long enough for the checks inside it on a busy machine, short to wait out


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[tuple[GatewayProcess, str]]:
    data_dir = tmp_path_factory.mktemp("overlap") / "gateway"
    admin_key = keys_create(data_dir, "root", ["admins"], store_url=module_store_url)
    gw = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={
            "rate_limits": {**GENEROUS_RATE_LIMITS, "auth_failures_per_address": "100000/minute"},
            "api_keys": {"max_rotation_overlap_seconds": MAX_OVERLAP},
        },
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {admin_key}"},
    )
    gw.start()
    try:
        yield gw, admin_key
    finally:
        gw.stop()


def _admin(gateway: tuple[GatewayProcess, str], method: str, path: str, **kwargs: Any) -> requests.Response:
    gw, key = gateway
    return requests.request(
        method,
        f"{gw.url}/admin/v1{path}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=TIMEOUT,
        **kwargs,
    )


def _new_key(gateway: tuple[GatewayProcess, str], principal: str) -> str:
    answer = _admin(
        gateway, "POST", "/api-keys", json={"principal": principal, "kind": "service", "groups": ["etl"]}
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["key"])


def _rotate(gateway: tuple[GatewayProcess, str], key: str, overlap: int | None) -> dict[str, Any]:
    body = None if overlap is None else {"overlap_seconds": overlap}
    answer = _admin(gateway, "POST", f"/api-keys/{split_key(key)[0]}/rotate", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _status(gw: GatewayProcess, credential: str) -> int:
    """What `GET /v1/config` answers a bearer credential (an API key or a gateway token)."""
    headers = {"Authorization": f"Bearer {credential}"}
    return requests.get(f"{gw.url}/v1/config", headers=headers, timeout=TIMEOUT).status_code


def _token(gw: GatewayProcess, key: str) -> requests.Response:
    client_id, secret = split_key(key)
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    return requests.post(f"{gw.url}/v1/oauth/tokens", data=form, timeout=TIMEOUT)


def _wait_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()) + 0.05)


def test_the_old_secret_and_its_tokens_work_during_the_window_and_stop_after_it(
    gateway: tuple[GatewayProcess, str],
) -> None:
    """Control, then attack: the rotated-out secret (and the tokens it proved) past the window."""
    gw = gateway[0]
    old = _new_key(gateway, "etl-overlap")
    token_before = _token(gw, old).json()["access_token"]  # issued before the rotation
    assert _status(gw, old) == 200  # verified and cached before the rotation

    rotated = _rotate(gateway, old, WINDOW)
    new = rotated["key"]
    until = datetime.fromisoformat(rotated["previous_secret_expires_at"]).timestamp()
    assert rotated["id"] == split_key(old)[0]
    assert new != old
    assert 0 < until - time.time() <= WINDOW

    # During the window: both secrets, the token from before, and a token from the old secret.
    assert _status(gw, new) == 200
    assert _status(gw, old) == 200
    assert _status(gw, token_before) == 200
    during = _token(gw, old)
    assert during.status_code == 200, during.text
    assert during.json()["expires_in"] <= WINDOW  # a token of the old secret lives no longer
    token_during = during.json()["access_token"]
    assert _status(gw, token_during) == 200
    assert time.time() < until, "the checks above must run inside the window"

    _wait_until(until)
    assert _status(gw, old) == 401
    assert _token(gw, old).status_code == 401
    assert _status(gw, token_before) == 401  # refused by the key's cut-off (its own exp is later)
    assert _status(gw, token_during) == 401
    assert _status(gw, new) == 200
    assert _status(gw, _token(gw, new).json()["access_token"]) == 200


def test_a_token_of_the_old_secret_cannot_be_refreshed_past_the_window(
    gateway: tuple[GatewayProcess, str],
) -> None:
    """Attack: token exchange of an old-secret token does not outlive the window."""
    gw = gateway[0]
    old = _new_key(gateway, "refresher")
    token = _token(gw, old).json()["access_token"]
    until = datetime.fromisoformat(_rotate(gateway, old, WINDOW)["previous_secret_expires_at"]).timestamp()
    form = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": token,
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
    }
    refreshed = requests.post(f"{gw.url}/v1/oauth/tokens", data=form, timeout=TIMEOUT)
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["expires_in"] <= WINDOW
    _wait_until(until)
    assert _status(gw, refreshed.json()["access_token"]) == 401
    assert requests.post(f"{gw.url}/v1/oauth/tokens", data=form, timeout=TIMEOUT).status_code == 400


def test_without_an_overlap_the_old_secret_stops_at_once(gateway: tuple[GatewayProcess, str]) -> None:
    gw = gateway[0]
    for overlap in (None, 0):
        old = _new_key(gateway, f"immediate-{overlap}")
        token = _token(gw, old).json()["access_token"]
        rotated = _rotate(gateway, old, overlap)
        assert rotated["previous_secret_expires_at"] is None
        assert _status(gw, old) == 401
        assert _status(gw, token) == 401
        assert _status(gw, rotated["key"]) == 200


def test_a_second_rotation_ends_the_first_old_secret(gateway: tuple[GatewayProcess, str]) -> None:
    """Attack: only one previous secret is kept, whatever windows were asked for."""
    gw = gateway[0]
    first = _new_key(gateway, "twice")
    first_token = _token(gw, first).json()["access_token"]
    second = _rotate(gateway, first, MAX_OVERLAP)["key"]
    assert _status(gw, first) == 200
    third = _rotate(gateway, second, MAX_OVERLAP)["key"]
    assert _status(gw, first) == 401
    assert _status(gw, first_token) == 401
    assert _status(gw, second) == 200  # the previous secret now, in its own window
    assert _status(gw, third) == 200


def test_a_revocation_ends_both_secrets_at_once(gateway: tuple[GatewayProcess, str]) -> None:
    """Attack: a revoked key's previous secret and its tokens stop with it."""
    gw = gateway[0]
    old = _new_key(gateway, "revoked-in-window")
    token = _token(gw, old).json()["access_token"]
    new = _rotate(gateway, old, MAX_OVERLAP)["key"]
    assert _status(gw, old) == 200
    assert _status(gw, new) == 200
    answer = _admin(gateway, "DELETE", f"/api-keys/{split_key(old)[0]}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["previous_secret_expires_at"] is None
    for credential in (old, new, token):
        assert _status(gw, credential) == 401


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"overlap_seconds": MAX_OVERLAP + 1}, f"overlap_seconds must be from 0 to {MAX_OVERLAP}"),
        ({"overlap_seconds": -1}, "overlap_seconds"),
        ({"overlap_seconds": "60"}, "overlap_seconds"),
        ({"overlap": 60}, "overlap"),
    ],
    ids=["above-the-bound", "negative", "a-string", "unknown-field"],
)
def test_a_bad_overlap_is_400_and_changes_nothing(
    gateway: tuple[GatewayProcess, str], body: dict[str, Any], message: str
) -> None:
    gw = gateway[0]
    key = _new_key(gateway, "bad-overlap")
    answer = _admin(gateway, "POST", f"/api-keys/{split_key(key)[0]}/rotate", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == 400
    assert message in error["message"]
    assert _status(gw, key) == 200  # still the key's one secret
    record = _admin(gateway, "GET", f"/api-keys/{split_key(key)[0]}").json()
    assert record["rotated_at"] is None
