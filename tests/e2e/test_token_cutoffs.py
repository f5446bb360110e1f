"""Token cut-off across real gateway processes: two instances share one PostgreSQL registry.

A token issued (on either instance) for an API key before the key is rotated or revoked is refused
by both instances within `api_keys.change_poll_seconds`, and cannot be refreshed through token
exchange; tokens from the new secret and tokens of other keys keep working. A rotation with an overlap
window keeps the old secret, and its tokens, working on both instances until the window ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import requests

from tests.e2e.test_scaleout import POLL_SECONDS, Cluster, _cluster, _wait_for
from tests.support.redis import RedisServer

EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def cluster(postgres_url: str, redis_server: RedisServer, tmp_path: Path) -> Iterator[Cluster]:
    with _cluster(tmp_path, postgres_url, redis_server.url) as started:
        yield started


def _token(url: str, form: dict[str, str]) -> requests.Response:
    return requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=30)


def _client_credentials(url: str, key: str) -> str:
    answer = _token(
        url, {"grant_type": "client_credentials", "client_id": key[4:20], "client_secret": key[21:]}
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _status(url: str, token: str) -> int:
    return requests.get(
        f"{url}/v1/config", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).status_code


def _exchange(url: str, token: str) -> requests.Response:
    return _token(url, {"grant_type": EXCHANGE, "subject_token": token, "subject_token_type": ACCESS_TOKEN})


@pytest.mark.parametrize("change", ["rotate", "revoke"])
def test_a_rotation_or_revocation_ends_earlier_tokens_on_every_instance(
    cluster: Cluster, change: str
) -> None:
    first, second = cluster.instances
    key = cluster.create_key("etl", ["admins"])
    other_key = cluster.create_key("other", ["admins"])
    key_id = key[4:20]
    # Tokens issued by each instance, used on both (so each has verified and cached them).
    old = [_client_credentials(gw.url, key) for gw in (first, second)]
    other = _client_credentials(second.url, other_key)
    for gw in (first, second):
        for token in (*old, other):
            assert _status(gw.url, token) == 200
    with cluster.session() as admin:
        if change == "rotate":
            answer = admin.post(f"{first.url}/admin/v1/api-keys/{key_id}/rotate", timeout=30)
        else:
            answer = admin.delete(f"{first.url}/admin/v1/api-keys/{key_id}", timeout=30)
    assert answer.status_code == 200, answer.text
    for token in old:
        assert _status(first.url, token) == 401  # at once on the instance that changed the key
    elapsed = _wait_for(
        lambda: all(_status(second.url, token) == 401 for token in old),
        "the other instance to refuse tokens issued before the change",
    )
    assert elapsed <= POLL_SECONDS + 3.0, elapsed  # a poll interval, and slack for a busy machine
    for gw in (first, second):
        refused = _exchange(gw.url, old[0])
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "invalid_request"
    # Control: the other key's token works and refreshes; the new secret's tokens work.
    for gw in (first, second):
        assert _status(gw.url, other) == 200
        assert _exchange(gw.url, other).status_code == 200
    if change == "rotate":
        new_key = str(answer.json()["key"])
        for gw in (first, second):
            fresh = _client_credentials(gw.url, new_key)
            assert _status(first.url, fresh) == 200
            assert _status(second.url, fresh) == 200
            refreshed = _exchange(gw.url, fresh)
            assert refreshed.status_code == 200, refreshed.text
            assert _status(second.url, refreshed.json()["access_token"]) == 200


OVERLAP_WINDOW = 10  # seconds: the checks inside it take a few on a busy machine


def _key_status(url: str, key: str) -> int:
    return _status(url, key)  # an API key as the bearer credential


def test_a_rotation_overlap_holds_on_every_instance_and_ends_there(cluster: Cluster) -> None:
    """The old secret of a rotation with an overlap works on both instances until the window
    ends, and so do the tokens it proved; after it, neither instance accepts them (attack), while
    the new secret keeps working (control)."""
    first, second = cluster.instances
    key = cluster.create_key("overlapping", ["admins"])
    key_id = key[4:20]
    before = [_client_credentials(gw.url, key) for gw in (first, second)]
    for gw in (first, second):
        assert _key_status(gw.url, key) == 200  # verified and cached by both before the rotation
    with cluster.session() as admin:
        answer = admin.post(
            f"{first.url}/admin/v1/api-keys/{key_id}/rotate",
            json={"overlap_seconds": OVERLAP_WINDOW},
            timeout=30,
        )
    assert answer.status_code == 200, answer.text
    new_key = str(answer.json()["key"])
    until = datetime.fromisoformat(answer.json()["previous_secret_expires_at"]).timestamp()
    # The other instance learns of the rotation from the feed (within change_poll_seconds; until
    # then its cached verification of the old secret is the pre-rotation one, and the token cut-off
    # still ends that secret's tokens with the window): then its new secret works there, and a
    # token the old secret proves there ends with the window.
    _wait_for(lambda: _key_status(second.url, new_key) == 200, "the new secret on the other instance")
    old_secret = {"grant_type": "client_credentials", "client_id": key_id, "client_secret": key[21:]}
    tokens: list[requests.Response] = []

    def ends_with_the_window() -> bool:
        tokens.append(_token(second.url, old_secret))
        bounded = tokens[-1].status_code == 200 and tokens[-1].json()["expires_in"] <= OVERLAP_WINDOW
        if not bounded:
            time.sleep(0.1)  # a few token requests per poll interval, well inside the token budget
        return bounded

    elapsed = _wait_for(ends_with_the_window, "a token of the old secret bounded by the window")
    assert elapsed <= POLL_SECONDS + 3.0, elapsed  # a poll interval, and slack for a busy machine
    during = tokens[-1]
    for gw in (first, second):
        assert _key_status(gw.url, key) == 200
        for token in (*before, during.json()["access_token"]):
            assert _status(gw.url, token) == 200
    assert time.time() < until, "the checks above must run inside the window"

    time.sleep(max(0.0, until - time.time()) + 0.05)
    for gw in (first, second):
        assert _key_status(gw.url, key) == 401
        for token in (*before, during.json()["access_token"]):
            assert _status(gw.url, token) == 401
        assert _key_status(gw.url, new_key) == 200


def test_a_revocation_during_an_overlap_ends_both_secrets_on_every_instance(cluster: Cluster) -> None:
    first, second = cluster.instances
    key = cluster.create_key("revoked-overlap", ["admins"])
    key_id = key[4:20]
    with cluster.session() as admin:
        rotated = admin.post(
            f"{first.url}/admin/v1/api-keys/{key_id}/rotate", json={"overlap_seconds": 600}, timeout=30
        )
        assert rotated.status_code == 200, rotated.text
        new_key = str(rotated.json()["key"])
        for gw in (first, second):
            assert _key_status(gw.url, key) == 200
            assert _key_status(gw.url, new_key) == 200
        assert admin.delete(f"{first.url}/admin/v1/api-keys/{key_id}", timeout=30).status_code == 200
    assert _key_status(first.url, key) == 401
    assert _key_status(first.url, new_key) == 401
    elapsed = _wait_for(
        lambda: _key_status(second.url, key) == 401 and _key_status(second.url, new_key) == 401,
        "the other instance to refuse both secrets",
    )
    assert elapsed <= POLL_SECONDS + 3.0, elapsed  # a poll interval, and slack for a busy machine
