"""`cedarberg keys create|list|revoke`: offline key management against a real SQLite store.

The output contract (only the key on stdout, one line on stderr for bad settings) is checked on a
real child process, because only a process shows what really reaches its stdout. The rest runs the
same code in-process with an explicit environment.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cedarberg.gateway.authn.api_keys import ApiKeyAuthenticator
from cedarberg.gateway.authn.errors import AuthenticationError
from cedarberg.gateway.authn.key_format import parse_api_key
from cedarberg.gateway.authn.key_store import open_key_store
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.cli.keys import add_keys_commands, run_keys_command

KEY_LINE = re.compile(r"cbk_[a-z2-7]{16}_[A-Za-z0-9_-]{43}\n")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
    env.update(extra)
    return env


def _cli(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cedarberg.gateway.cli", "keys", *argv],
        capture_output=True,
        text=True,
        env=env if env is not None else _clean_env(),
        cwd=cwd or REPO_ROOT,
        timeout=60,
        check=False,
    )


def _run(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The command in-process: exit code, stdout, stderr."""
    parser = argparse.ArgumentParser(prog="cedarberg")
    add_keys_commands(parser.add_subparsers(dest="command", required=True))
    out, err = io.StringIO(), io.StringIO()
    code = run_keys_command(parser.parse_args(["keys", *argv]), environ or {}, out, err)
    return code, out.getvalue(), err.getvalue()


def _url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{(data_dir / 'catalog.db').resolve()}"


async def _authenticate(url: str, key: str) -> Principal:
    store = await open_key_store(url)
    try:
        return await ApiKeyAuthenticator(store).authenticate(key)
    finally:
        await store.close()


def _create(data_dir: Path, *extra: str) -> str:
    code, out, err = _run(
        "create", "--person", "alice", "--group", "admins", "--data-dir", str(data_dir), *extra
    )
    assert code == 0, err
    return out.strip()


def test_create_prints_only_the_key_which_authenticates(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = _cli(
        "create", "--principal", "etl-bot", "--kind", "service", "--group", "writers", "--group", "etl",
        "--expires-in-days", "7", "--description", "nightly load", "--data-dir", str(data_dir),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert KEY_LINE.fullmatch(result.stdout), result.stdout
    key = result.stdout.strip()
    parsed = parse_api_key(key)
    # The status line names the key id, never the secret.
    assert parsed.key_id in result.stderr
    assert parsed.secret not in result.stderr
    assert len(result.stderr.splitlines()) == 1

    principal = asyncio.run(_authenticate(_url(data_dir), key))
    assert principal.id == "key:etl-bot"
    assert principal.kind is PrincipalKind.SERVICE
    assert principal.groups == frozenset({"writers", "etl"})
    assert principal.auth_method is AuthMethod.API_KEY
    assert principal.attributes["api_key_id"] == parsed.key_id


def test_create_prints_engine_forms_after_the_key_when_asked(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    code, out, err = _run(
        "create", "--person", "alice", "--data-dir", str(data_dir),
        "--engine-forms", "--url", "https://catalog.example:8181/",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    # The first line is still the bare key, which authenticates.
    assert KEY_LINE.fullmatch(lines[0] + "\n"), out
    parsed = parse_api_key(lines[0])
    assert asyncio.run(_authenticate(_url(data_dir), lines[0])).id == "key:alice"
    assert f"credential={parsed.key_id}:{parsed.secret}" in lines
    assert (
        f"CREATE SECRET cedarberg (TYPE iceberg, CLIENT_ID '{parsed.key_id}', "
        f"CLIENT_SECRET '{parsed.secret}', OAUTH2_SERVER_URI 'https://catalog.example:8181/v1/oauth/tokens');"
    ) in lines
    assert (
        "ATTACH 'default' AS lake (TYPE iceberg, ENDPOINT 'https://catalog.example:8181', SECRET cedarberg);"
        in lines
    )
    # The secret goes to stdout only.
    assert parsed.secret not in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run_on_terminal(*argv: str, environ: dict[str, str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="cedarberg")
    add_keys_commands(parser.add_subparsers(dest="command", required=True))
    out = _Terminal()
    code = run_keys_command(parser.parse_args(["keys", *argv]), environ, out, io.StringIO())
    return code, out.getvalue()


def test_engine_forms_default_to_the_gateway_address_and_only_on_a_terminal(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    environ = {"CEDARBERG_HOST": "0.0.0.0", "CEDARBERG_PORT": "9000"}
    # Captured (not a terminal): the key alone, as `KEY=$(cedarberg keys create ...)` expects.
    code, out, _ = _run("create", "--person", "bob", "--data-dir", str(data_dir), environ=environ)
    assert code == 0
    assert KEY_LINE.fullmatch(out), out

    code, out = _run_on_terminal("create", "--person", "bob", "--data-dir", str(data_dir), environ=environ)
    assert code == 0
    assert KEY_LINE.fullmatch(out.splitlines()[0] + "\n")
    assert "OAUTH2_SERVER_URI 'http://localhost:9000/v1/oauth/tokens'" in out
    code, out = _run_on_terminal(
        "create", "--person", "bob", "--data-dir", str(data_dir), "--no-engine-forms", environ=environ
    )
    assert code == 0
    assert KEY_LINE.fullmatch(out), out


def test_settings_come_from_config_env_and_flags_in_that_order(tmp_path: Path) -> None:
    config = tmp_path / "cedarberg.toml"
    from_file, from_env, from_flag = tmp_path / "file", tmp_path / "env", tmp_path / "flag"
    config.write_text(f'data_dir = "{from_file}"\n', encoding="utf-8")

    key = _run("create", "--person", "a", "--config", str(config))[1].strip()
    assert asyncio.run(_authenticate(_url(from_file), key)).id == "key:a"

    env = {"CEDARBERG_DATA_DIR": str(from_env)}
    key = _run("create", "--person", "b", "--config", str(config), environ=env)[1].strip()
    assert asyncio.run(_authenticate(_url(from_env), key)).id == "key:b"

    argv = ("create", "--person", "c", "--config", str(config), "--data-dir", str(from_flag))
    key = _run(*argv, environ=env)[1].strip()
    assert asyncio.run(_authenticate(_url(from_flag), key)).id == "key:c"

    store_url = f"sqlite+aiosqlite:///{tmp_path / 'elsewhere.db'}"
    key = _run("create", "--person", "d", "--store-url", store_url, environ=env)[1].strip()
    assert asyncio.run(_authenticate(store_url, key)).id == "key:d"


def test_list_never_shows_secrets(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    alice = parse_api_key(_create(data_dir))
    code, out, err = _run("create", "--person", "bob", "--group", "readers", "--data-dir", str(data_dir))
    assert code == 0, err
    bob = parse_api_key(out.strip())

    code, table, _ = _run("list", "--data-dir", str(data_dir))
    assert code == 0
    code, lines, _ = _run("list", "--json", "--data-dir", str(data_dir))
    assert code == 0
    for output in (table, lines):
        assert alice.key_id in output
        assert bob.key_id in output
        assert alice.secret not in output
        assert bob.secret not in output
        assert "argon2" not in output.lower()
        assert "cbk_" not in output
    assert table.splitlines()[0].split() == [
        "ID",
        "PRINCIPAL",
        "KIND",
        "GROUPS",
        "CREATED",
        "EXPIRES",
        "STATUS",
    ]
    assert len(lines.splitlines()) == 2
    assert '"status":"active"' in lines

    code, only_bob, _ = _run("list", "--principal", "bob", "--json", "--data-dir", str(data_dir))
    assert code == 0
    assert bob.key_id in only_bob
    assert alice.key_id not in only_bob


def test_revoke(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = _create(data_dir)
    key_id = parse_api_key(key).key_id

    code, out, _ = _run("revoke", key_id, "--data-dir", str(data_dir))
    assert code == 0
    assert out.startswith(f"revoked API key {key_id}")
    with pytest.raises(AuthenticationError):
        asyncio.run(_authenticate(_url(data_dir), key))
    code, table, _ = _run("list", "--data-dir", str(data_dir))
    assert "revoked" in table.splitlines()[1]

    code, out, _ = _run("revoke", key_id, "--data-dir", str(data_dir))  # idempotent
    assert code == 0
    assert "already revoked" in out

    code, out, err = _run("revoke", "aaaaaaaaaaaaaaaa", "--data-dir", str(data_dir))
    assert (code, out, err.strip()) == (1, "", "cedarberg: no API key aaaaaaaaaaaaaaaa")
    code, out, err = _run("revoke", key, "--data-dir", str(data_dir))  # a whole key is not an id
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert "not a key id" in err
    assert parse_api_key(key).secret not in err


def test_invalid_key_requests_exit_2(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    for argv in (
        ("--person", " padded"),
        ("--person", "x" * 300),
        ("--person", "a", "--group", "bad\ngroup"),
    ):
        code, out, err = _run("create", *argv, "--data-dir", str(data_dir))
        assert code == 2, argv
        assert out == ""
        assert len(err.splitlines()) == 1
        assert err.startswith("cedarberg keys create: ")


def test_expiry(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _create(data_dir, "--expires-in-days", "30")
    code, lines, _ = _run("list", "--json", "--data-dir", str(data_dir))
    assert code == 0
    expires = datetime.fromisoformat(lines.split('"expires_at":"')[1].split('"')[0])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--store-url", "mysql://db/x"], {}, "invalid setting 'store_url'"),
        (["--config", "{tmp}/missing.toml"], {}, "cannot read"),
        (["--config", "{tmp}/bad.toml"], {}, "is not valid TOML"),
        ([], {"CEDARBERG_STORE_URL": "mysql://db/x"}, "invalid setting 'store_url'"),
    ],
    ids=["flag", "missing-config", "bad-toml", "environment"],
)
def test_bad_settings_exit_2_with_one_line(
    tmp_path: Path, argv: list[str], env: dict[str, str], message: str
) -> None:
    (tmp_path / "bad.toml").write_text("data_dir = [\n", encoding="utf-8")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    result = _cli(
        "create", "--person", "alice", "--group", "admins", *argv, env=_clean_env(**env), cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cedarberg: ")
    assert message in lines[0]
    assert not (tmp_path / ".cedarberg").exists()  # nothing was created


def test_unusable_store_exits_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    code, out, err = _run("list", "--data-dir", str(blocker / "data"))
    assert code == 1
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("cedarberg: ")


def test_create_and_revoke_append_to_the_audit_file_naming_the_key_never_the_secret(tmp_path: Path) -> None:
    data_dir, audit_file = tmp_path / "data", tmp_path / "audit" / "audit.jsonl"
    env = _clean_env(CEDARBERG_AUDIT__DESTINATION=str(audit_file))
    made = _cli("create", "--service", "etl", "--no-engine-forms", "--data-dir", str(data_dir), env=env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    key_id = parse_api_key(key).key_id
    revoked = _cli("revoke", key_id, "--data-dir", str(data_dir), env=env)
    assert revoked.returncode == 0, revoked.stderr
    again = _cli("revoke", key_id, "--data-dir", str(data_dir), env=env)  # already revoked: no change
    assert again.returncode == 0, again.stderr
    text = audit_file.read_text()
    assert parse_api_key(key).secret not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [(r["event"], r["action"], r["resource"], r["outcome"]) for r in records] == [
        ("mutation", "createApiKey", f'Cedarberg::ApiKey::"{key_id}"', "success"),
        ("mutation", "revokeApiKey", f'Cedarberg::ApiKey::"{key_id}"', "success"),
    ]
    for record in records:
        assert record["stream"] == "audit"
        assert record["principal"] is None  # no gateway principal acted: the command says who did
        assert record["detail"]["key_id"] == key_id
        assert record["detail"]["key_principal"] == "key:etl"
        assert record["detail"]["via"] == "cedarberg keys (offline)"
        assert record["detail"]["os_user"]


def test_an_unusable_audit_file_stops_the_command_before_it_changes_anything(tmp_path: Path) -> None:
    data_dir, blocker = tmp_path / "data", tmp_path / "not-a-directory"
    blocker.write_text("a file where the audit directory should be", encoding="utf-8")
    env = _clean_env(CEDARBERG_AUDIT__DESTINATION=str(blocker / "audit.jsonl"))
    made = _cli("create", "--service", "etl", "--no-engine-forms", "--data-dir", str(data_dir), env=env)
    assert made.returncode == 1
    assert made.stdout == ""  # no key was shown: none was made
    assert "audit log" in made.stderr
    code, table, _ = _run("list", "--json", "--data-dir", str(data_dir))
    assert code == 0
    assert table == ""
