"""Hot reload: watch the policy directory and reload the engine when a file changes.

The watcher polls a cheap fingerprint (name, size, mtime, inode of the schema and every `*.cedar`
file) every `interval` seconds; once a change has held still for one poll, `PolicyEngine.reload()`
runs in a worker thread (parsing must not stall the event loop). Waiting for it to hold still
keeps a file from being read while it is written in place: a truncated file can parse as a
valid set that lacks a `forbid` (a CI run of the refusal-signal test loaded such a set). The
engine compares content hashes, so a touch without a change is a no-op, and a refused set is
logged once and leaves the last good set active.

    watcher = PolicyWatcher(engine, interval=1.0)
    async with watcher:            # starts the polling task; stops it on exit
        ...
    await watcher.reload_now()     # SIGHUP: reload at once, whatever the fingerprint says
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from types import TracebackType

from cedarberg.gateway.authz.engine import PolicyEngine, ReloadOutcome
from cedarberg.gateway.authz.loader import POLICY_SUFFIX, SCHEMA_FILE

log = logging.getLogger("cedarberg.gateway.authz")

Fingerprint = tuple[tuple[str, int, int, int], ...]


def fingerprint(directory: Path) -> Fingerprint:
    """What changes when a policy file is added, removed, replaced or written."""
    entries: list[tuple[str, int, int, int]] = []
    try:
        paths = [directory / SCHEMA_FILE, *directory.glob("*" + POLICY_SUFFIX)]
    except OSError:
        return ()
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        entries.append((path.name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(sorted(entries))


class PolicyWatcher:
    """Polls the engine's directory and reloads on change. One task per watcher."""

    def __init__(self, engine: PolicyEngine, interval: float = 1.0) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._engine = engine
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        # Empty: the first poll compares contents once, catching edits made before the start.
        self._seen: Fingerprint = ()
        self._settling: Fingerprint | None = None  # a change seen at the last poll, not yet loaded
        self._lock = asyncio.Lock()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def reload_now(self) -> ReloadOutcome:
        """Reload at once (SIGHUP, admin API). Never raises."""
        async with self._lock:
            self._seen = fingerprint(self._engine.directory)
            return await asyncio.to_thread(self._engine.reload)

    async def check(self) -> ReloadOutcome | None:
        """One poll: reload if the fingerprint changed and is what the previous poll saw; None
        when nothing changed or the change is still moving."""
        current = fingerprint(self._engine.directory)
        if current == self._seen:
            self._settling = None
            return None
        if current != self._settling:
            self._settling = current
            return None
        self._settling = None
        return await self.reload_now()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.check()
            except Exception:  # the watcher must outlive any surprise; the engine keeps its set
                log.exception("policy watcher poll failed")

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.create_task(self._run(), name="policy-watcher")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> PolicyWatcher:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
