"""One store stack: every runtime store (the registry, API keys, the user directory, console
sessions) runs on the registry's drivers; SQLAlchemy's asynchronous extension is for PostgreSQL
migrations only, and aiosqlite is never imported.

Two proofs, because each misses what the other sees:
- a gateway serving on SQLite (two workers: keys created, verified, listed and revoked, the
  catalog written and read) runs with an import watch installed in every one of its processes
  (a `sitecustomize` on PYTHONPATH), which records any import of `aiosqlite` or
  `sqlalchemy.ext.asyncio`, with its stack, the moment it happens: what the gateway does, not
  what its source seems to say;
- a scan of the product's source for those imports (any spelling: `import`, `from ... import`,
  `importlib.import_module`), outside the one module allowed to migrate PostgreSQL with them: it
  covers code the request path above does not run.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import Connection, insert, select

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.catalog.store.engine import on_schema_connection
from cedarberg.gateway.authn.directory import UserDirectory, directory_users
from cedarberg.gateway.authn.key_store import api_keys, connect_key_store, migrate_gateway, open_key_store
from cedarberg.gateway.config.settings import SettingsError, load_settings
from tests.support import gateway as gateway_support
from tests.support.gateway import REPO_ROOT, GatewayProcess
from tests.support.ports import free_port

WATCHED = ("aiosqlite", "sqlalchemy.ext.asyncio")
REPORT_ENV = "STORE_STACK_IMPORT_REPORT"
# The asynchronous extension drives PostgreSQL migrations (Alembic needs a synchronous
# connection; asyncpg is the only PostgreSQL driver installed). Nothing else may import it.
ALLOWED = {Path("catalog/store/engine.py")}
PRODUCT_PACKAGES = ("catalog", "gateway", "kms")

_HOOK = textwrap.dedent(
    f"""
    import os, sys, traceback

    _REPORT = os.environ.get({REPORT_ENV!r})
    _WATCHED = {WATCHED!r}


    class _ImportWatch:
        def find_spec(self, name, path=None, target=None):
            if any(name == w or name.startswith(w + ".") for w in _WATCHED):
                with open(os.path.join(_REPORT, f"import-{{os.getpid()}}-{{name}}.txt"), "w") as out:
                    out.write("".join(traceback.format_stack()))
            return None


    def _started():
        open(os.path.join(_REPORT, f"process-{{os.getpid()}}"), "w").close()


    if _REPORT:
        sys.meta_path.insert(0, _ImportWatch())
        _started()
        os.register_at_fork(after_in_child=_started)  # forked workers keep the watch: say so
    """
)


def _watched_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Environment additions that install the import watch in every Python process started
    with them, and the directory where it reports."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(_HOOK)
    report = tmp_path / "imports"
    report.mkdir()
    path = os.pathsep.join([str(hook_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"PYTHONPATH": path, REPORT_ENV: str(report)}, report


def _imports(report: Path) -> dict[str, str]:
    return {entry.name: entry.read_text() for entry in report.glob("import-*")}


def test_a_gateway_serving_on_sqlite_never_imports_the_async_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, report = _watched_env(tmp_path)
    # A plain process per gateway (the fork server imported everything before any watch).
    monkeypatch.setattr(gateway_support, "fork_server", lambda: None)
    with GatewayProcess(tmp_path / "gw", extra_args=["--workers", "2"], env=env) as gw:
        admin = {"Authorization": f"Bearer {gw.admin_key}"}  # a key created through the store
        for i in range(6):  # across both workers: key verification, registry writes and reads
            created = requests.post(
                f"{gw.url}/v1/namespaces", json={"namespace": [f"ns{i}"]}, headers=admin, timeout=30
            )
            assert created.status_code == 200, created.text
            assert requests.get(f"{gw.url}/v1/namespaces/ns{i}", headers=admin, timeout=30).status_code == 200
        made = requests.post(
            f"{gw.url}/admin/v1/api-keys",
            json={"principal": "etl", "kind": "service", "groups": ["etl"]},
            headers=admin,
            timeout=30,
        )
        assert made.status_code == 201, made.text
        key_id = made.json()["id"]
        listed = requests.get(f"{gw.url}/admin/v1/api-keys", headers=admin, timeout=30)
        assert listed.status_code == 200
        assert key_id in listed.text
        revoked = requests.delete(f"{gw.url}/admin/v1/api-keys/{key_id}", headers=admin, timeout=30)
        assert revoked.status_code == 200, revoked.text  # a change feed write
        assert revoked.json()["revoked_at"] is not None
        assert gw.is_running
    started = list(report.glob("process-*"))
    assert len(started) >= 3, "the watch ran in the gateway's processes (supervisor, two workers)"
    assert _imports(report) == {}


def test_the_watch_sees_the_postgres_migration_path_import_the_async_extension(tmp_path: Path) -> None:
    """Control: the watch does report the import where it happens (a PostgreSQL migration, here
    on an unreachable server), so its silence above means something."""
    env, report = _watched_env(tmp_path)
    probe = (
        "import asyncio\n"
        "from cedarberg.catalog.errors import StorageUnavailableError\n"
        "from cedarberg.gateway.authn.key_store import migrate_gateway\n"
        "try:\n"
        f"    asyncio.run(migrate_gateway('postgresql+asyncpg://nobody@127.0.0.1:{free_port()}/none'))\n"
        "except StorageUnavailableError as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "cannot open the registry" in done.stdout  # the key tables migrate with the registry
    seen = _imports(report)
    assert any(name.endswith("-sqlalchemy.ext.asyncio.txt") for name in seen), seen
    assert not any("aiosqlite" in name for name in seen)


def _imported_names(tree: ast.AST) -> set[str]:
    """Every module a source file imports, in any spelling (`import a.b`, `from a import b`
    counts a and a.b, `importlib.import_module("a.b")` / `__import__("a.b")` with a literal)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def _forbidden(names: set[str]) -> set[str]:
    return {n for n in names if any(n == w or n.startswith(w + ".") for w in WATCHED)}


def test_no_product_module_imports_the_async_stack_outside_postgres_migrations() -> None:
    offenders: dict[str, set[str]] = {}
    scanned = 0
    for package in PRODUCT_PACKAGES:
        for source in sorted((REPO_ROOT / package).rglob("*.py")):
            relative = source.relative_to(REPO_ROOT)
            scanned += 1
            found = _forbidden(_imported_names(ast.parse(source.read_text(), str(source))))
            if found and relative not in ALLOWED:
                offenders[str(relative)] = found
    assert scanned > 100
    assert offenders == {}
    # The one allowed module does use it (for PostgreSQL), so the scan recognises the spelling.
    allowed = REPO_ROOT / "catalog/store/engine.py"
    assert "sqlalchemy.ext.asyncio" in _forbidden(_imported_names(ast.parse(allowed.read_text())))


@pytest.mark.parametrize(
    "source",
    [
        "import aiosqlite",
        "from sqlalchemy.ext.asyncio import create_async_engine",
        "from sqlalchemy.ext import asyncio",
        "import sqlalchemy.ext.asyncio as sa_async",
        "importlib.import_module('aiosqlite')",
        "__import__('sqlalchemy.ext.asyncio')",
    ],
)
def test_the_scan_recognises_every_spelling(source: str) -> None:
    assert _forbidden(_imported_names(ast.parse(source)))


# -- store URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///{dir}/catalog.db",
        "sqlite+aiosqlite:///{dir}/catalog.db",
        "postgresql+asyncpg://gw@127.0.0.1:5432/registry",
        "postgresql://gw@127.0.0.1:5432/registry",
    ],
)
def test_settings_accept_both_spellings_of_each_store(url: str, tmp_path: Path) -> None:
    settings = load_settings(None, {"CEDARBERG_STORE_URL": url.format(dir=tmp_path)}, {})
    assert settings.effective_store_url() == url.format(dir=tmp_path)


@pytest.mark.parametrize(
    "url", ["mysql://gw@127.0.0.1/registry", "sqlite+pysqlcipher:///x.db", "postgresql+psycopg2://gw@h/db"]
)
def test_any_other_store_url_is_refused_naming_the_forms(url: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(None, {"CEDARBERG_STORE_URL": url}, {})
    message = str(refused.value)
    assert "store_url" in message
    assert "sqlite:///PATH" in message
    assert "postgresql+asyncpg://" in message
    assert url not in message  # a URL may carry a password: never echoed


def test_the_default_store_is_the_plain_sqlite_url(tmp_path: Path) -> None:
    settings = load_settings(None, {}, {"data_dir": tmp_path})
    assert settings.effective_store_url() == f"sqlite:///{(tmp_path / 'catalog.db').resolve()}"


async def test_both_sqlite_spellings_open_the_same_file(tmp_path: Path) -> None:
    """Deployments keep their `sqlite+aiosqlite:///` setting: it names the same database as the
    plain form, on the same driver (no aiosqlite behind it)."""
    path = tmp_path / "catalog.db"
    old = await open_key_store(f"sqlite+aiosqlite:///{path}")
    new = await open_key_store(f"sqlite:///{path}")
    try:
        directory = UserDirectory(old)
        await directory.put("alice", ["analysts"])
        seen = await UserDirectory(new).get("alice")
        assert seen is not None
        assert seen.groups == ("analysts",)
        assert "aiosqlite" not in sys.modules
    finally:
        await old.close()
        await new.close()


async def test_an_unsupported_url_opens_no_store() -> None:
    with pytest.raises(StorageUnavailableError, match=r"sqlite:///PATH .* postgresql\+asyncpg://"):
        connect_key_store("mysql://gw@127.0.0.1/registry")
    with pytest.raises(StorageUnavailableError, match=r"sqlite:///PATH .* postgresql\+asyncpg://"):
        await migrate_gateway("mysql://gw@127.0.0.1/registry")


# -- rows as SQLAlchemy's engines wrote them --------------------------------------------------------

CREATED = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


async def test_rows_read_and_written_as_sqlalchemy_engines_did(tmp_path: Path, store_url: str | None) -> None:
    """Existing databases hold rows SQLAlchemy's engines wrote (through its type processing);
    the drivers read them back as the same values, and what the drivers write SQLAlchemy reads
    back as it always did: one format, whichever stack wrote a row."""
    url = store_url or f"sqlite:///{tmp_path / 'catalog.db'}"
    store = await open_key_store(url)
    old_row = {
        "id": "k" * 16,
        "principal": "etl",
        "kind": "service",
        "groups": ["b", "a"],
        "secret_hash": "$argon2id$hash",
        "created_at": CREATED,
        "expires_at": CREATED + timedelta(days=3),
        "description": "written by an engine",
    }

    def write_old(conn: Connection) -> None:
        conn.execute(insert(api_keys).values(old_row))
        conn.execute(
            insert(directory_users).values(name="alice", groups=["x"], created_at=CREATED, updated_at=CREATED)
        )

    try:
        await on_schema_connection(url, write_old, failure="write")
        stored = await store.get(old_row["id"])
        assert stored is not None
        assert stored.secret_hash == old_row["secret_hash"]
        assert (stored.record.groups, stored.record.created_at) == (("b", "a"), CREATED)
        assert stored.record.expires_at == old_row["expires_at"]
        alice = await UserDirectory(store).get("alice")
        assert alice is not None
        assert (alice.groups, alice.created_at) == (("x",), CREATED)

        await UserDirectory(store).put("bob", ["y", "z"])
        revoked_at = CREATED + timedelta(hours=1)
        assert await store.revoke(old_row["id"], revoked_at) == 1

        def read_new(conn: Connection) -> tuple[Any, Any]:
            key = conn.execute(select(api_keys).where(api_keys.c.id == old_row["id"])).one()
            bob = conn.execute(select(directory_users).where(directory_users.c.name == "bob")).one()
            return key, bob

        key, bob = await on_schema_connection(url, read_new, failure="read", write=False)
        assert key.groups == ["b", "a"]
        assert key.revoked_at.replace(tzinfo=UTC) == revoked_at
        assert bob.groups == ["y", "z"]
    finally:
        await store.close()
