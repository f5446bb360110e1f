"""A private PostgreSQL 15 server for the tests.

One server per test session, on a free loopback port, with its data directory and unix socket
inside a temporary directory, trust authentication and durability switched off (it holds only
throw-away test data). When the tests run as root, ``initdb`` and ``pg_ctl`` run as the
``postgres`` system user, since PostgreSQL refuses to run as root.

The benchmark suite (bench/cedarberg.py) starts its own ``PostgresServer(durable=True)``: the
server's defaults (``fsync``, ``synchronous_commit`` and ``full_page_writes`` on), since it
measures commits as production pays for them.

``create_database(name)`` gives a fresh database and its ``postgresql+asyncpg://`` URL;
``migrated_database()`` a fresh database already at the registry's schema head, cloned with
``CREATE DATABASE ... TEMPLATE`` from one database migrated once per server (a clone costs a file
copy of an almost empty database; migrating costs an Alembic run per test).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

PG_BIN = Path(os.environ.get("PG_BIN_DIR", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"
MIGRATED_TEMPLATE = "cedarberg_migrated_template"
_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresError(RuntimeError):
    """The test PostgreSQL server could not be started, used or stopped."""


class PostgresServer:
    """A throw-away PostgreSQL cluster listening on ``127.0.0.1:port``.

    Its files go to a new directory under ``parent`` (default: the system's temporary directory);
    ``durable`` keeps the server's durability defaults instead of switching them off.
    """

    def __init__(self, port: int | None = None, *, durable: bool = False, parent: Path | None = None) -> None:
        self.port = port or free_port()
        self.durable = durable
        self.parent = parent
        self.base_dir: Path | None = None
        self._counter = itertools.count(1)
        self._running = False
        self._template_lock = threading.Lock()
        self._template_ready = False

    # -- paths -------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._base / "data"

    @property
    def socket_dir(self) -> Path:
        return self._base

    @property
    def log_path(self) -> Path:
        return self._base / "postgres.log"

    @property
    def _base(self) -> Path:
        if self.base_dir is None:
            raise PostgresError("the PostgreSQL server has not been started")
        return self.base_dir

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster and start the server; waits until it accepts connections."""
        if self._running:
            return
        initdb = PG_BIN / "initdb"
        if not initdb.exists():
            raise PostgresError(f"{initdb} not found: make test installs it (scripts/install-test-deps.sh)")
        # A short path: the unix socket path must stay under ~107 bytes.
        self.base_dir = Path(tempfile.mkdtemp(prefix="cedarberg-pg-", dir=self.parent))
        if _as_root():
            shutil.chown(self.base_dir, user=SUPERUSER)
        self._run(
            [
                str(initdb),
                "-D",
                str(self.data_dir),
                "-A",
                "trust",
                "-U",
                SUPERUSER,
                *(() if self.durable else ("--no-sync",)),
                "-E",
                "UTF8",
                "--locale=C",
            ],
        )
        # Test data is thrown away: no need to pay for surviving power loss.
        volatile = (
            () if self.durable else ("-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
        )
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-k {self.socket_dir}",
                *volatile,
                "-c max_connections=300",
            ]
        )
        self._run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
        self._running = True

    def stop(self) -> None:
        """Stop the server and delete its files. Safe to call more than once."""
        if self.base_dir is None:
            return
        if self._running:
            try:
                self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"])
            finally:
                self._running = False
        shutil.rmtree(self.base_dir, ignore_errors=True)
        self.base_dir = None

    def halt(self, mode: str) -> None:
        """Stop the server process with shutdown `mode` ("smart", "fast" or "immediate"), keeping
        its files: `resume` starts it again on the same port and data (fault-injection tests)."""
        if mode not in ("smart", "fast", "immediate"):
            raise PostgresError(f"unknown shutdown mode {mode!r}")
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop"])
        self._running = False

    def resume(self) -> None:
        """Start a server `halt` stopped, with the options it ran with (`pg_ctl restart` reads
        them back from postmaster.opts); after an immediate stop it recovers from its WAL first."""
        self._run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                "60",
                "restart",
            ]
        )
        self._running = True

    def pause(self) -> None:
        """Freeze the server (SIGSTOP to its postmaster and every backend): it still accepts TCP
        connections, in the kernel's backlog, and answers nothing until `unpause`."""
        for pid in self._process_ids():
            os.kill(pid, signal.SIGSTOP)

    def unpause(self) -> None:
        for pid in self._process_ids():
            os.kill(pid, signal.SIGCONT)

    def _process_ids(self) -> list[int]:
        """The postmaster (first line of its pid file) and its children."""
        postmaster = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        return [postmaster, *(int(child) for child in children)]

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- databases ---------------------------------------------------------------------------

    def url(self, database: str) -> str:
        """The SQLAlchemy URL the gateway takes for ``database``."""
        return f"postgresql+asyncpg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (dropping any old one of that name); return its URL.

        Without ``name`` a unique one is made up.
        """
        if name is None:
            name = f"cedarberg_test_{next(self._counter)}"
        name = name.lower()
        if not _NAME_RE.match(name):
            raise PostgresError(f"unsuitable database name {name!r}")
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def migrated_database(self) -> str:
        """A fresh database whose schema is at head (as `cedarberg serve` leaves it); its URL.

        The first call migrates ``MIGRATED_TEMPLATE`` (the gateway's own ``upgrade``); every call
        clones it. Nothing ever connects to the template after its migration, as a clone needs."""
        with self._template_lock:
            if not self._template_ready:
                _run_outside_loop(_upgrade, self.create_database(MIGRATED_TEMPLATE))
                self._template_ready = True
        return self.clone_database(MIGRATED_TEMPLATE)

    def clone_database(self, template: str) -> str:
        """A fresh database holding a copy of database `template` (which nobody may be connected
        to); its URL."""
        name = f"cedarberg_test_{next(self._counter)}"
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run one SQL command through ``psql`` over TCP; return its unaligned output."""
        if not self._running:
            raise PostgresError("the PostgreSQL server is not running")
        result = subprocess.run(
            [
                str(PG_BIN / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                database,
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise PostgresError(f"psql {sql!r} failed: {result.stderr.strip()}")
        return result.stdout

    # -- helpers -----------------------------------------------------------------------------

    def _run(self, argv: list[str]) -> None:
        if _as_root():
            argv = ["runuser", "-u", SUPERUSER, "--", *argv]
        result = subprocess.run(
            argv,
            cwd=self._base,  # readable by the postgres user, unlike /root
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            log = ""
            if self.base_dir is not None and self.log_path.exists():
                log = "\n--- server log ---\n" + self.log_path.read_text(errors="replace")[-4000:]
            raise PostgresError(
                f"{shlex.join(argv)} exited {result.returncode}:\n{result.stdout}{result.stderr}{log}"
            )


async def _upgrade(url: str) -> None:
    from cedarberg.gateway.serve.migrate import upgrade

    await upgrade(url)


def _run_outside_loop(migrate: Callable[[str], Coroutine[Any, Any, None]], url: str) -> None:
    """Run `migrate(url)` to completion on a loop of its own, also when called from a coroutine
    (an async fixture): a thread, since a running loop cannot run another."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(migrate(url))
        except BaseException as exc:  # re-raised in the caller's thread
            failures.append(exc)

    thread = threading.Thread(target=run, name="migrate-template")
    thread.start()
    thread.join()
    if failures:
        raise PostgresError(f"migrating the template database failed: {failures[0]!r}") from failures[0]


def database_name(url: str) -> str:
    """The database a ``PostgresServer.url`` names."""
    return url.rsplit("/", 1)[1]


def _as_root() -> bool:
    return os.geteuid() == 0


_server: PostgresServer | None = None


def get_server() -> PostgresServer:
    """The session's server, started on first use and stopped when the interpreter exits
    (the ``postgres_server`` fixture stops it earlier, at the end of the test session)."""
    global _server  # noqa: PLW0603
    if _server is None or _server.base_dir is None:
        server = PostgresServer()
        server.start()
        atexit.register(server.stop)
        _server = server
    return _server


def stop_server() -> None:
    """Stop the session's server if one was started."""
    global _server  # noqa: PLW0603
    if _server is not None:
        _server.stop()
        _server = None


def create_database(name: str | None = None) -> str:
    """A fresh database on the session's server; returns its ``postgresql+asyncpg://`` URL."""
    return get_server().create_database(name)
