"""`cedarberg serve` as a process tree and across schema versions.

- `--workers N`: a supervisor and N workers on one port; connections are spread over the workers
  by how many each has open, TLS included; a dead worker is replaced; SIGHUP reaches every worker;
  SIGTERM stops them all with status 0; a supervisor killed outright takes its workers with it.
- `cedarberg db current|upgrade` on a registry left at the previous release's schema, and what
  `serve` does with such a registry (`migrate_on_start`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cedarberg
from tests.support.gateway import REPO_ROOT, GatewayProcess
from tests.support.migrations import as_two_histories, migrate_one_history, on_registry, version_tables
from tests.support.tls import make_pki

POLICIES = REPO_ROOT / "policies"
DEADLINE_SECONDS = 15.0


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(item) for item in path.read_text().split()} if path.exists() else set()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_for(condition: Any, what: str, timeout: float = DEADLINE_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _workers(gw: GatewayProcess, count: int = 2) -> set[int]:
    """The pids of the supervisor's workers, once all `count` run (and, on SQLite, its registry
    writer: `gateway.serve.registry_writer`, not a worker)."""
    assert gw.pid is not None
    writer = gw.registry_writer_pid()
    _wait_for(lambda: len(_children(gw.pid or 0) - {writer}) == count, f"{count} workers")
    return _children(gw.pid) - {writer}


def _request(url: str, method: str = "GET", body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def _create_namespace(gw: GatewayProcess, name: str) -> int:
    status, _ = _request(f"{gw.url}/v1/namespaces", "POST", {"namespace": [name]})
    return status


def test_workers_share_the_port_and_are_replaced_when_they_die(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "gw", extra_args=["--workers", "2"])
    with gw:
        workers = _workers(gw)
        # Writes from both workers on the one embedded SQLite registry.
        assert [_create_namespace(gw, f"ns{i}") for i in range(30)] == [200] * 30
        status, listing = _request(f"{gw.url}/v1/namespaces")
        assert status == 200
        assert sorted(ns[0] for ns in listing["namespaces"]) == sorted(f"ns{i}" for i in range(30))

        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        _wait_for(
            lambda: victim not in _children(gw.pid or 0) and len(_workers(gw)) == 2,
            "the dead worker to be replaced",
        )
        replacement = _workers(gw) - workers
        assert len(replacement) == 1
        assert [_create_namespace(gw, f"after{i}") for i in range(10)] == [200] * 10
        current = _children(gw.pid)
        code = gw.stop()
    assert code == 0
    assert not any(_alive(pid) for pid in current)
    assert "worker 0 started" in gw.log_text() or "worker 1 started" in gw.log_text()


def _established(pid: int, port: int) -> int:
    """How many established TCP connections on local port `port` process `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        if local_port == port and fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
            count += 1
    return count


def _open_tls_connections(gw: GatewayProcess, context: ssl.SSLContext, count: int) -> list[ssl.SSLSocket]:
    """`count` connections, each having had one request answered (kept alive)."""
    connections = []
    for _ in range(count):
        raw = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        conn = context.wrap_socket(raw, server_hostname="localhost")
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 200"), "the handed connection was not served"
        connections.append(conn)
    return connections


def test_connections_are_spread_over_the_workers_by_how_many_each_has_open(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    config = {"tls": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}}
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    two_workers = ["--workers", "2"]
    with GatewayProcess(tmp_path / "gw", config=config, extra_args=two_workers, ca_cert=pki.ca_cert) as gw:
        workers = _workers(gw)
        # Eight clients at once (as an engine opens its pool): four each, not all on whichever
        # worker woke first.
        first = _open_tls_connections(gw, context, 8)
        assert sorted(_established(pid, gw.port) for pid in workers) == [4, 4]

        # A worker dies with its four; the four next connections all go to its replacement, which
        # has none open, rather than alternating with the survivor, which has four.
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        _wait_for(lambda: len(_workers(gw) - workers) == 1, "the dead worker to be replaced")
        (replacement,) = _workers(gw) - workers
        (survivor,) = workers - {victim}
        second = _open_tls_connections(gw, context, 4)
        assert (_established(replacement, gw.port), _established(survivor, gw.port)) == (4, 4)
        for conn in first + second:
            conn.close()


def test_sighup_reloads_the_policies_of_every_worker(tmp_path: Path) -> None:
    policy_dir = tmp_path / "policies"
    shutil.copytree(POLICIES, policy_dir, ignore=shutil.ignore_patterns("tests"))
    config = {"authz": {"policy_dir": str(policy_dir), "reload_interval_seconds": 0}}
    with GatewayProcess(tmp_path / "gw", config=config, extra_args=["--workers", "2"]) as gw:
        _workers(gw)
        assert _create_namespace(gw, "before") == 200
        (policy_dir / "freeze.cedar").write_text(
            '@id("freeze-namespaces")\n'
            'forbid (principal, action == Cedarberg::Action::"createNamespace", resource);\n'
        )
        time.sleep(0.3)
        assert _create_namespace(gw, "still-allowed") == 200  # the watcher is off: nothing yet
        os.kill(gw.pid, signal.SIGHUP)
        _wait_for(lambda: _create_namespace(gw, f"probe{time.monotonic_ns()}") == 403, "a reload")
        time.sleep(0.5)  # both workers have had the signal for a while now
        # New connections are spread over both workers: every one of them refuses now.
        assert {_create_namespace(gw, f"after{i}") for i in range(20)} == {403}


def test_a_killed_supervisor_takes_its_workers_with_it(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "gw", extra_args=["--workers", "2"])
    with gw:
        _workers(gw)
        children = _children(gw.pid or 0)  # the workers and the registry writer
        assert gw.registry_writer_pid() in children
        gw.kill()
        _wait_for(lambda: not any(_alive(pid) for pid in children), "the workers and the writer to exit")
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{gw.url}/v1/config", timeout=5)


# -- schema upgrades ---------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cedarberg(*args)


def _previous_release_schema(url: str) -> None:
    """Put the registry back where a release with two migration histories left it, its gateway
    history at gw0001 (0006 + gw0001: the one history at 0007, kept in two version tables)."""

    async def run() -> None:
        await on_registry(url, migrate_one_history, "downgrade", "0007")
        await on_registry(url, as_two_histories, "gw0001")

    asyncio.run(run())


def _revisions(url: str) -> dict[str, list[str]]:
    return asyncio.run(on_registry(url, version_tables))


PREVIOUS_RELEASE = {"alembic_version": ["0006"], "alembic_version_gateway": ["gw0001"]}


@pytest.fixture(params=["sqlite", "postgres"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str | None, str]:
    """(store URL for the gateway or None for embedded SQLite, the registry's URL for the test)."""
    if request.param == "sqlite":
        return None, f"sqlite+aiosqlite:///{tmp_path / 'gw' / 'catalog.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url, url


def test_db_upgrade_brings_a_previous_release_registry_to_head(
    tmp_path: Path, registry: tuple[str | None, str]
) -> None:
    store_url, sync_url = registry
    data_dir = tmp_path / "gw"
    location_args = ["--data-dir", str(data_dir)] + (["--store-url", store_url] if store_url else [])
    gw = GatewayProcess(data_dir, store_url=store_url)
    with gw:
        key = gw.admin_key
        assert _create_namespace(gw, "kept") == 200
        status, _ = _request(
            f"{gw.url}/v1/namespaces/kept/tables",
            "POST",
            {"name": "t", "schema": {"type": "struct", "fields": [
                {"id": 1, "name": "id", "type": "long", "required": False}]}},
        )  # fmt: skip
        assert status == 200
        _, loaded = _request(f"{gw.url}/v1/namespaces/kept/tables/t")
    _previous_release_schema(sync_url)
    assert _revisions(sync_url) == PREVIOUS_RELEASE

    current = _cli("db", "current", *location_args)
    assert current.returncode == 3, current.stderr
    assert "registry: 0006 + gateway gw0001 (two histories" in current.stdout
    assert "(needs 0015)" in current.stdout

    strict = GatewayProcess(data_dir, store_url=store_url, config={"migrate_on_start": False})
    strict.config_path.write_text("migrate_on_start = false\n")
    refused = _cli("serve", "--port", str(strict.port), "--config", str(strict.config_path), *location_args)
    assert refused.returncode == 1
    assert "registry schema is outdated (registry: 0006 + gateway gw0001" in refused.stderr
    assert "cedarberg db upgrade" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert _revisions(sync_url) == PREVIOUS_RELEASE  # refusing changed nothing

    upgraded = _cli("db", "upgrade", *location_args)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "registry: 0015 (from 0006 + gateway gw0001" in upgraded.stdout
    assert _revisions(sync_url) == {"alembic_version": ["0015"]}
    current = _cli("db", "current", *location_args)
    assert current.returncode == 0, current.stderr
    assert current.stdout.strip() == "registry: 0015 (head)"

    with strict:  # the same data, served by a gateway that does not migrate by itself
        request = urllib.request.Request(
            f"{strict.url}/v1/namespaces/kept/tables/t", headers={"Authorization": f"Bearer {key}"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.loads(answer.read())["metadata"] == loaded["metadata"]


def test_serve_upgrades_an_outdated_registry_by_default(tmp_path: Path) -> None:
    data_dir = tmp_path / "gw"
    sync_url = f"sqlite+aiosqlite:///{data_dir / 'catalog.db'}"
    with GatewayProcess(data_dir) as gw:
        assert _create_namespace(gw, "kept") == 200
    _previous_release_schema(sync_url)
    with GatewayProcess(data_dir) as gw:
        status, body = _request(f"{gw.url}/v1/namespaces/kept")
        assert status == 200
        assert body["namespace"] == ["kept"]
    assert _revisions(sync_url) == {"alembic_version": ["0015"]}
