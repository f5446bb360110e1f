"""The SQLite registry's writer process of a gateway with several workers.

SQLite lets one connection write at a time. Workers that each wrote on their own connection
would queue on the file's lock (busy waits, each commit syncing alone); instead the supervisor
starts one writer process (catalog.store.sqlite_writer) that owns the writer connection, and
every worker hands it its write transactions (catalog.store.sqlite_handoff) and reads on its own
connections. Transactions from all workers then share the writer's group commits.

The listening socket is created by the supervisor before any process is forked, in a directory
only this user can enter, and kept open for the gateway's life: a writer that dies is replaced
by the supervisor, and workers' connections made meanwhile wait in the socket's backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import socket
import tempfile
from pathlib import Path

from cedarberg.catalog.store.connect import SQLITE_BUSY_TIMEOUT_SECONDS
from cedarberg.catalog.store.sqlite_driver import SqliteDriver
from cedarberg.catalog.store.sqlite_handoff import hand_writes_to
from cedarberg.catalog.store.sqlite_writer import SqliteWriter
from cedarberg.catalog.store.urls import sqlite_path
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.serve.event_loop import new_event_loop

log = logging.getLogger("cedarberg.supervisor")
_BACKLOG = 128  # every worker's sessions may queue here while a writer is being replaced


class RegistryWriter:
    """The writer's socket and what runs in the writer process and in each worker."""

    def __init__(self, database: str, settings: Settings) -> None:
        self._database = database
        self._settings = settings
        self._directory = tempfile.mkdtemp(prefix="cedarberg-writer-")  # mode 0700
        self.socket_path = str(Path(self._directory) / "writer.sock")
        self._listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(self.socket_path)
            self._listener.listen(_BACKLOG)
        except BaseException:
            self.close()
            raise

    @classmethod
    def for_settings(cls, settings: Settings) -> RegistryWriter | None:
        """A writer for a SQLite registry file served by several workers; None otherwise (one
        worker writes itself; PostgreSQL has no single-writer lock)."""
        path = sqlite_path(settings.effective_store_url())
        if settings.workers < 2 or path is None or path == ":memory:":
            return None
        return cls(path, settings)

    def run(self) -> int:
        """The writer process's life (forked by the supervisor): serve until SIGTERM, then let
        the group under way commit. Returns the exit status."""
        assert self._listener is not None
        # The workers' kind of loop: each write is a message in and a message out.
        with asyncio.Runner(loop_factory=lambda: new_event_loop(self._settings)) as runner:
            runner.run(self._serve(self._listener))
        return 0

    async def _serve(self, listener: socket.socket) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signo in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signo, stop.set)
        driver = SqliteDriver(self._database, readers=0, busy_timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
        await SqliteWriter(driver, patience=SQLITE_BUSY_TIMEOUT_SECONDS).serve(listener, stop)

    def in_worker(self) -> None:
        """In a worker (after the fork): hand the registry's writes to the writer."""
        if self._listener is not None:
            self._listener.close()  # only the writer accepts
            self._listener = None
        hand_writes_to(self._database, self.socket_path)

    def close(self) -> None:
        """In the supervisor, once the writer has exited: remove the socket."""
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None
        shutil.rmtree(self._directory, ignore_errors=True)
