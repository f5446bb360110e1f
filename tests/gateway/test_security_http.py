"""The security pipeline over real HTTP: generic refusals, the failed-authentication budget,
expired tokens (419), policy hot reload and SIGHUP, and no secret in any log."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from tests.support.gateway import REPO_ROOT, GatewayProcess
from tests.support.secure import keys_create

TIMEOUT = 30
POLICIES = REPO_ROOT / "policies"


def _wait_for(predicate, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def secured(tmp_path: Path, fresh_store_url: str | None) -> tuple[GatewayProcess, str, Path]:
    data_dir = tmp_path / "gw"
    policy_dir = tmp_path / "policies"
    shutil.copytree(POLICIES, policy_dir)
    admin = keys_create(data_dir, "root", ["admins"], store_url=fresh_store_url)
    audit = tmp_path / "audit.jsonl"
    gw = GatewayProcess(
        data_dir,
        store_url=fresh_store_url,
        anonymous=False,
        config={
            "authz": {"policy_dir": str(policy_dir), "reload_interval_seconds": 0.5},
            "audit": {"destination": str(audit)},
            "rate_limits": {"auth_failures_per_address": "20/minute"},
        },
        probe_headers={"Authorization": f"Bearer {admin}"},
    )
    gw.start()
    yield gw, admin, policy_dir
    gw.stop()


def _status(gw: GatewayProcess, headers: dict[str, str]) -> requests.Response:
    return requests.get(f"{gw.url}/v1/namespaces", headers=headers, timeout=TIMEOUT)


def test_refusals_are_generic_and_guessing_is_rate_limited(secured: tuple[GatewayProcess, str, Path]) -> None:
    gw, admin, _ = secured
    missing = _status(gw, {})
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    bodies = set()
    guesses = [
        "cbk_aaaaaaaaaaaaaaaa_" + "A" * 43,  # well-formed, unknown id
        "cbk_short",  # malformed
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",  # alg none
        admin[:-1] + ("B" if admin[-1] != "B" else "C"),  # right id, wrong secret
    ]
    for guess in guesses:
        answer = _status(gw, {"Authorization": f"Bearer {guess}"})
        assert answer.status_code == 401
        bodies.add(answer.text)
    assert len(bodies) == 1, "every refusal must look the same"
    statuses = [_status(gw, {"X-Api-Key": guesses[0]}).status_code for _ in range(20)]
    assert statuses.count(401) == 16  # 4 failures above + 16 = the budget of 20
    assert statuses[-1] == 429
    limited = _status(gw, {"X-Api-Key": admin})
    assert limited.status_code == 429, "past the failure budget nothing is verified, even a good key"
    assert int(limited.headers["Retry-After"]) > 0
    assert limited.json()["error"]["code"] == 429


def test_expired_gateway_token_answers_419(secured: tuple[GatewayProcess, str, Path]) -> None:
    gw, admin, _ = secured
    key_id, secret = admin.removeprefix("cbk_").split("_", 1)
    issued = requests.post(
        f"{gw.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": secret},
        timeout=TIMEOUT,
    )
    assert issued.status_code == 200
    token = issued.json()["access_token"]
    assert _status(gw, {"Authorization": f"Bearer {token}"}).status_code == 200
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    signing_key = load_pem_private_key((gw.data_dir / "token-signing-key.pem").read_bytes(), None)
    now = int(time.time())
    expired = jwt.encode(
        {**claims, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600},
        signing_key,
        algorithm="EdDSA",
        headers=header,
    )
    answer = _status(gw, {"Authorization": f"Bearer {expired}"})
    assert answer.status_code == 419
    assert answer.json()["error"]["type"] == "AuthenticationTimeoutException"


def test_reader_is_refused_writes_and_does_not_see_ungranted_namespaces(
    secured: tuple[GatewayProcess, str, Path],
) -> None:
    gw, admin, _ = secured
    as_admin = {"Authorization": f"Bearer {admin}"}
    for name, props in (("open", {"cedarberg.readers": "analysts"}), ("hidden", {})):
        created = requests.post(
            f"{gw.url}/v1/namespaces",
            json={"namespace": [name], "properties": props},
            headers=as_admin,
            timeout=TIMEOUT,
        )
        assert created.status_code == 200
    reader = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": "ana", "kind": "user", "groups": ["analysts"]},
        headers=as_admin,
        timeout=TIMEOUT,
    ).json()["key"]
    as_reader = {"Authorization": f"Bearer {reader}"}
    listed = requests.get(f"{gw.url}/v1/namespaces", headers=as_reader, timeout=TIMEOUT).json()["namespaces"]
    assert listed == [["open"]]
    hidden = requests.get(f"{gw.url}/v1/namespaces/hidden", headers=as_reader, timeout=TIMEOUT)
    assert hidden.status_code == 404
    assert hidden.json()["error"]["type"] == "NoSuchNamespaceException"
    schema = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    refused = requests.post(
        f"{gw.url}/v1/namespaces/open/tables",
        json={"name": "t", "schema": schema},
        headers=as_reader,
        timeout=TIMEOUT,
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "ForbiddenException"
    tables = requests.get(f"{gw.url}/v1/namespaces/open/tables", headers=as_admin, timeout=TIMEOUT).json()
    assert tables["identifiers"] == []


def test_policy_reload_refuses_a_broken_set_and_sighup_reloads(
    secured: tuple[GatewayProcess, str, Path],
) -> None:
    gw, admin, policy_dir = secured
    as_admin = {"Authorization": f"Bearer {admin}"}
    version = requests.get(f"{gw.url}/admin/v1/policies", headers=as_admin, timeout=TIMEOUT).json()["version"]
    (policy_dir / "broken.cedar").write_text(
        'permit (principal, action == Cedarberg::Action::"noSuchAction", resource);\n'
    )

    def refused() -> bool:
        shown = requests.get(f"{gw.url}/admin/v1/policies", headers=as_admin, timeout=TIMEOUT).json()
        return shown.get("last_error") is not None or shown.get("refused") is not None

    assert _wait_for(refused), "the broken set must be refused and reported"
    shown = requests.get(f"{gw.url}/admin/v1/policies", headers=as_admin, timeout=TIMEOUT).json()
    assert shown["version"] == version, "the last good set stays active"
    assert _status(gw, as_admin).status_code == 200
    (policy_dir / "broken.cedar").unlink()
    (policy_dir / "extra.cedar").write_text(
        '@id("extra")\nforbid (principal, action, resource) when { false };\n'
    )
    assert gw.process is not None
    gw.process.send_signal(signal.SIGHUP)

    def changed() -> bool:
        return (
            requests.get(f"{gw.url}/admin/v1/policies", headers=as_admin, timeout=TIMEOUT).json()["version"]
            != version
        )

    assert _wait_for(changed)


def test_no_secret_reaches_the_logs(secured: tuple[GatewayProcess, str, Path]) -> None:
    gw, admin, _ = secured
    key_id, secret = admin.removeprefix("cbk_").split("_", 1)
    token = requests.post(
        f"{gw.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": key_id, "client_secret": secret},
        timeout=TIMEOUT,
    ).json()["access_token"]
    assert _status(gw, {"Authorization": f"Bearer {token}"}).status_code == 200
    assert _status(gw, {"X-Api-Key": admin}).status_code == 200
    assert _status(gw, {"Authorization": f"Bearer {admin[:-2]}xx"}).status_code == 401
    created = requests.post(
        f"{gw.url}/admin/v1/api-keys",
        json={"principal": "svc", "kind": "service", "groups": ["etl"]},
        headers={"X-Api-Key": admin},
        timeout=TIMEOUT,
    ).json()["key"]
    audit = gw.data_dir.parent / "audit.jsonl"
    assert _wait_for(lambda: audit.exists() and audit.stat().st_size > 0)
    logs = gw.log_text() + audit.read_text()
    for value in (secret, token, created.split("_", 2)[2], token.split(".")[2]):
        assert value not in logs
