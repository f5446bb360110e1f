"""The PostgreSQL 15 cluster of the ``http-1w-pg`` variant, started by the suite itself.

It is the test suite's private server (tests/support/postgres.py: ``initdb`` into the bench's
work directory, a free port on 127.0.0.1, run as the ``postgres`` user when the suite runs as
root, so that user must be able to traverse the work directory), but durable: ``fsync``,
``synchronous_commit`` and ``full_page_writes`` keep their defaults (on), as in production. The
server is stopped when the context exits, even on error; its log is copied beside the gateway's
first, since stopping deletes the cluster's files.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from tests.support.postgres import PostgresServer

DATABASE = "cedarberg_bench"
# What decides whether a commit acknowledged by PostgreSQL survives power loss (and what it costs).
DURABILITY_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")


@contextlib.contextmanager
def running_postgres(work_dir: Path) -> Iterator[PostgresServer]:
    """A durable PostgreSQL cluster under ``work_dir``, stopped (and its files deleted) on exit."""
    work_dir.mkdir(parents=True, exist_ok=True)
    server = PostgresServer(durable=True, parent=work_dir)
    try:
        server.start()
        yield server
    finally:
        if server.base_dir is not None:
            with contextlib.suppress(OSError):
                shutil.copyfile(server.log_path, work_dir / "postgres.log")
        server.stop()


def durability(server: PostgresServer) -> dict[str, str]:
    """The running server's durability settings (``SHOW``), e.g. ``{"fsync": "on", ...}``."""
    return {name: server.psql(f"SHOW {name}").strip() for name in DURABILITY_SETTINGS}
