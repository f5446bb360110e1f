"""What the key store acknowledged survives the gateway's SIGKILL, on SQLite and PostgreSQL.

The API key store runs on the registry's drivers (`catalog.store.connect.open_driver`): a write is
acknowledged only after its COMMIT returned, which on SQLite synced the WAL (synchronous=FULL)
and on PostgreSQL flushed the commit record (synchronous_commit on). The attack: the holder of a
revoked key, and of a gateway token issued for it before the revocation, hopes a crash right
after the revocation was answered brings the key back. The control: a key created just before
the crash works after it.
"""

from __future__ import annotations

from pathlib import Path

import requests

from tests.support.gateway import GatewayProcess
from tests.support.secure import split_key

REVOKED_KEYS = 4
TIMEOUT = 30


def _create_key(gw: GatewayProcess, admin: dict[str, str], principal: str) -> str:
    made = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": principal, "kind": "service", "groups": ["etl"]},
        headers=admin,
        timeout=TIMEOUT,
    )
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _token(gw: GatewayProcess, key: str) -> str:
    client_id, secret = split_key(key)
    answer = requests.post(
        f"{gw.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _status(gw: GatewayProcess, bearer: str) -> int:
    answer = requests.get(
        f"{gw.url}/v1/namespaces", headers={"Authorization": f"Bearer {bearer}"}, timeout=TIMEOUT
    )
    return answer.status_code


def test_an_acknowledged_revocation_survives_a_kill_and_an_acknowledged_key_too(
    tmp_path: Path, store_url: str | None
) -> None:
    gw = GatewayProcess(tmp_path / "gw", store_url=store_url)
    with gw:
        admin = {"Authorization": f"Bearer {gw.admin_key}"}
        revoked: list[tuple[str, str]] = []  # (key, a token issued for it before the revocation)
        for i in range(REVOKED_KEYS):
            key = _create_key(gw, admin, f"mallory{i}")
            token = _token(gw, key)
            assert _status(gw, key) == 200  # verified: the gateway's cache now holds it
            assert _status(gw, token) == 200
            revoked.append((key, token))
        kept = _create_key(gw, admin, "etl")
        for key, _ in revoked:
            key_id, _ = split_key(key)
            answer = requests.delete(f"{gw.url}/admin/v1/api-keys/{key_id}", headers=admin, timeout=TIMEOUT)
            assert answer.status_code == 200, answer.text
        gw.kill()  # SIGKILL right after the last acknowledgement: no graceful anything
        gw.start()
        for key, token in revoked:
            assert _status(gw, key) == 401
            assert _status(gw, token) == 401
        assert _status(gw, kept) == 200  # control: the key acknowledged before the crash works
        listed = requests.get(f"{gw.url}/admin/v1/api-keys", headers=admin, timeout=TIMEOUT)
        assert listed.status_code == 200
        states = {record["principal"]: record["revoked_at"] for record in listed.json()["api-keys"]}
        assert all(states[f"mallory{i}"] is not None for i in range(REVOKED_KEYS))
        assert states["etl"] is None
