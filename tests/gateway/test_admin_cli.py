"""`cedarberg admin ...` against a real gateway: the real `cedarberg` command in a subprocess,
over HTTPS to a `SecureGateway` (TLS, no anonymous access, an admin key bootstrapped offline).

Each command is driven as an operator would (the admin key in `CB_ADMIN_KEY` or a key file, the
deployment's CA with `--ca-file`), and each is refused for a non-admin key with the gateway's own
403 message. What the commands did is checked through the gateway's API, not through their output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.gateway import REPO_ROOT, free_port, to_toml
from tests.support.secure import SecureGateway, split_key
from tests.support.tls import make_pki

TIMEOUT = 120


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None) -> Iterator[SecureGateway]:
    with SecureGateway(tmp_path_factory.mktemp("admin-cli"), store_url=module_store_url) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def outsider(gw: SecureGateway) -> str:
    """A valid key that is not an admin's (group etl)."""
    return gw.create_key("outsider", ["etl"])


def _env(key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CEDARBERG_", "CB_ADMIN_"))}
    if key is not None:
        env["CB_ADMIN_KEY"] = key
    return env


def admin_cli(
    gw: SecureGateway,
    *argv: str,
    key: str | None = None,
    connect: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`cedarberg admin ARGV` with the admin key (or `key`) in CB_ADMIN_KEY, pointed at `gw`."""
    command = [sys.executable, "-m", "cedarberg.gateway.cli", "admin", *argv]
    if connect:
        command += ["--url", gw.url, "--ca-file", str(gw.ca_cert)]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env if env is not None else _env(key or gw.admin_key),
        cwd=REPO_ROOT,
        timeout=TIMEOUT,
        check=False,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def _refused_403(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("cedarberg admin: 403: "), done.stderr
    assert "(ForbiddenException)" in done.stderr


def _properties(gw: SecureGateway, namespace: str) -> dict[str, str]:
    answer = gw.admin.get(gw.catalog_url(f"namespaces/{gw.ns_path(namespace)}"), timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["properties"])


# -- namespaces -------------------------------------------------------------------------------


def test_namespaces_create_show_grant_and_revoke(gw: SecureGateway) -> None:
    """Control: a namespace with grants, then a group granted and one revoked."""
    created = _ok(admin_cli(gw, "namespaces", "create", "sales", "--readers", "bi", "--writers", "etl"))
    assert created.stdout.splitlines()[:3] == ["created: sales", "  readers: bi", "  writers: etl"]
    assert _properties(gw, "sales") == {"cedarberg.readers": "bi", "cedarberg.writers": "etl"}

    granted = _ok(admin_cli(gw, "namespaces", "grant", "sales", "--readers", "analysts", "--readers", "bi"))
    assert "  readers: bi, analysts" in granted.stdout.splitlines()
    assert _properties(gw, "sales")["cedarberg.readers"] == "bi,analysts"

    revoked = _ok(admin_cli(gw, "namespaces", "revoke", "sales", "--readers", "bi", "--writers", "etl"))
    assert revoked.stdout.splitlines()[1:3] == ["  readers: analysts", "  writers: (none)"]
    assert _properties(gw, "sales") == {"cedarberg.readers": "analysts"}

    shown = json.loads(_ok(admin_cli(gw, "namespaces", "show", "sales", "--json")).stdout)
    assert shown["namespace"] == ["sales"]
    assert shown["properties"]["cedarberg.readers"] == "analysts"


def test_namespace_errors_are_the_gateways_messages(gw: SecureGateway, outsider: str) -> None:
    """Attack: a non-admin cannot create or grant; errors carry the status and ErrorModel message."""
    _refused_403(admin_cli(gw, "namespaces", "create", "stolen", "--writers", "etl", key=outsider))
    # The outsider may read this namespace (so it sees it), but not change its grants.
    gw.create_namespace("guarded", readers=["etl"])
    _refused_403(admin_cli(gw, "namespaces", "grant", "guarded", "--writers", "etl", key=outsider))
    assert _properties(gw, "guarded") == {"cedarberg.readers": "etl"}
    # A namespace it may not see is one that does not exist, as the gateway answers everyone.
    gw.create_namespace("hidden", readers=["bi"])
    hidden = admin_cli(gw, "namespaces", "grant", "hidden", "--writers", "etl", key=outsider)
    assert hidden.returncode == 1
    assert hidden.stderr.startswith("cedarberg admin: 404: "), hidden.stderr
    assert _properties(gw, "hidden") == {"cedarberg.readers": "bi"}
    missing = admin_cli(gw, "namespaces", "show", "nowhere")
    assert missing.returncode == 1
    assert missing.stderr.startswith("cedarberg admin: 404: Namespace does not exist: nowhere"), (
        missing.stderr
    )
    empty = admin_cli(gw, "namespaces", "grant", "guarded")
    assert empty.returncode == 2
    assert "give --readers GROUP or --writers GROUP" in empty.stderr


# -- keys -------------------------------------------------------------------------------------


def test_keys_create_says_whom_the_key_is_for(gw: SecureGateway) -> None:
    service = _ok(admin_cli(gw, "keys", "create", "--service", "etl-bot", "--group", "etl"))
    key = service.stdout.strip()
    split_key(key)  # stdout is the key alone
    assert f"created API key {key[4:20]}: a service key for etl-bot (groups: etl)" in service.stderr
    assert key not in service.stderr
    assert (
        requests.get(
            f"{gw.url}/v1/config",
            headers={"Authorization": f"Bearer {key}"},
            verify=str(gw.ca_cert),
            timeout=30,
        ).status_code
        == 200
    )

    person = json.loads(_ok(admin_cli(gw, "keys", "create", "--person", "dana", "--json")).stdout)
    assert person["summary"] == "a personal key for dana"
    assert person["kind"] == "user"

    neither = admin_cli(gw, "keys", "create", "--group", "etl")
    assert neither.returncode == 2
    assert "say whom the key is for: --person NAME (a personal key) or --service NAME" in neither.stderr
    assert neither.stdout == ""


def test_keys_list_rotate_with_overlap_and_revoke(gw: SecureGateway) -> None:
    old = gw.create_key("rotated-bot", ["etl"])
    key_id = split_key(old)[0]

    rotated = _ok(admin_cli(gw, "keys", "rotate", key_id, "--overlap", "1h"))
    new = rotated.stdout.strip()
    assert split_key(new)[0] == key_id
    assert new != old
    assert (
        f"rotated API key {key_id} (a service key for rotated-bot); the old secret works until"
        in rotated.stderr
    )
    for credential in (old, new):
        assert gw.session(credential).get(f"{gw.url}/v1/config", timeout=30).status_code == 200

    listing = _ok(admin_cli(gw, "keys", "list", "--principal", "rotated-bot")).stdout.splitlines()
    assert listing[0].split() == ["ID", "PRINCIPAL", "FOR", "GROUPS", "EXPIRES", "STATUS"]
    assert listing[1].startswith(key_id)
    assert "service" in listing[1]
    assert "active (old secret until" in listing[1]

    revoked = _ok(admin_cli(gw, "keys", "revoke", key_id))
    assert revoked.stdout.startswith(f"revoked API key {key_id} at ")
    for credential in (old, new):
        assert gw.session(credential).get(f"{gw.url}/v1/config", timeout=30).status_code == 401
    records = json.loads(_ok(admin_cli(gw, "keys", "list", "--principal", "rotated-bot", "--json")).stdout)
    assert [r["id"] for r in records["api-keys"]] == [key_id]
    assert records["api-keys"][0]["revoked_at"] is not None


def test_keys_commands_refused_for_a_non_admin(gw: SecureGateway, outsider: str) -> None:
    """Attack: an ordinary key cannot list, create, rotate or revoke keys (its own included)."""
    own_id = split_key(outsider)[0]
    _refused_403(admin_cli(gw, "keys", "list", key=outsider))
    _refused_403(admin_cli(gw, "keys", "create", "--person", "mallory", "--group", "admins", key=outsider))
    _refused_403(admin_cli(gw, "keys", "rotate", own_id, "--overlap", "1h", key=outsider))
    _refused_403(admin_cli(gw, "keys", "revoke", gw.admin_key[4:20], key=outsider))
    assert gw.session(gw.admin_key).get(f"{gw.url}/v1/config", timeout=30).status_code == 200


def test_a_rotation_overlap_above_the_bound_is_the_gateways_400(gw: SecureGateway) -> None:
    key_id = split_key(gw.create_key("bounded", ["etl"]))[0]
    done = admin_cli(gw, "keys", "rotate", key_id, "--overlap", "2d")
    assert done.returncode == 1
    assert done.stderr.startswith("cedarberg admin: 400: overlap_seconds must be from 0 to 86400"), (
        done.stderr
    )


# -- explain and review -----------------------------------------------------------------------


def test_explain_and_review_use_the_live_grants(gw: SecureGateway, outsider: str) -> None:
    gw.create_namespace("finance", readers=["auditors"])
    allowed = _ok(
        admin_cli(
            gw,
            "explain",
            "--principal",
            "key:ann",
            "--group",
            "auditors",
            "--action",
            "loadTable",
            "--resource",
            f"{gw.prefix}/finance/ledger",
        )
    ).stdout.splitlines()
    assert allowed[0].startswith("ALLOW loadTable on "), allowed
    assert allowed[0].endswith(f'Table::"{gw.prefix}/finance/ledger" for Cedarberg::User::"key:ann"'), allowed
    assert any(line.startswith("  determined by: ") and ".cedar:" in line for line in allowed)
    assert allowed[-1].startswith("grants from: catalog; policy set version: ")
    denied = json.loads(
        _ok(
            admin_cli(
                gw,
                "explain",
                "--principal",
                "key:bob",
                "--group",
                "etl",
                "--action",
                "loadTable",
                "--resource",
                f"{gw.prefix}/finance/ledger",
                "--json",
            )
        ).stdout
    )
    assert denied["decision"] == "deny"
    assert denied["grants_from"] == "catalog"

    review = _ok(admin_cli(gw, "review", "--resource", f"{gw.prefix}/finance")).stdout
    assert "group auditors" in review
    as_json = json.loads(_ok(admin_cli(gw, "review", "--resource", f"{gw.prefix}/finance", "--json")).stdout)
    assert as_json["resource"]

    _refused_403(admin_cli(gw, "explain", "--principal", "key:x", "--action", "loadTable", key=outsider))
    _refused_403(admin_cli(gw, "review", "--resource", f"{gw.prefix}/finance", key=outsider))


# -- connection and credential ----------------------------------------------------------------


def test_the_credential_comes_from_the_environment_or_a_file_never_an_argument(
    gw: SecureGateway, tmp_path: Path
) -> None:
    missing = admin_cli(gw, "keys", "list", env=_env(None))
    assert missing.returncode == 2
    assert "no admin credential: set CB_ADMIN_KEY" in missing.stderr
    key_file = tmp_path / "admin.key"
    key_file.write_text(gw.admin_key + "\n", encoding="utf-8")
    from_file = admin_cli(gw, "keys", "list", "--key-file", str(key_file), env=_env(None))
    assert from_file.returncode == 0, from_file.stderr
    helped = admin_cli(gw, "keys", "list", "--help", connect=False)
    assert "shell history" in " ".join(helped.stdout.split())
    wrong = admin_cli(gw, "keys", "list", key="cbk_" + "a" * 16 + "_" + "b" * 43)
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("cedarberg admin: 401: ")
    assert "b" * 43 not in wrong.stderr


def test_the_url_comes_from_the_settings_and_the_gateway_is_verified(
    gw: SecureGateway, tmp_path: Path
) -> None:
    """The URL is derived from the deployment's settings (as serve reads them); a gateway whose
    certificate the given CA did not sign is refused, and an unreachable one is a clear error."""
    config = tmp_path / "deployment.toml"
    settings: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": gw.process.port,
        "tls": {"cert_file": str(gw.pki.server_cert), "key_file": str(gw.pki.server_key)},
    }
    config.write_text(to_toml(settings), encoding="utf-8")
    command = ["keys", "list", "--config", str(config), "--ca-file", str(gw.ca_cert)]
    assert admin_cli(gw, *command, connect=False).returncode == 0
    other_ca = make_pki(tmp_path / "other").ca_cert
    untrusted = admin_cli(gw, "keys", "list", "--url", gw.url, "--ca-file", str(other_ca), connect=False)
    assert untrusted.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    down = admin_cli(gw, "keys", "list", "--url", f"https://127.0.0.1:{free_port()}", connect=False)
    assert down.returncode == 1
    assert "cannot reach the gateway at https://127.0.0.1:" in down.stderr
