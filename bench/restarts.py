"""A server under test that is started again, from scratch, after it crashes.

Only the peer gets this: SeaweedFS's ``weed mini`` can crash under the write scenarios (a nil
pointer dereference in its filer's CreateEntry when wrk drops in-flight concurrent namespace
creations at the end of a run, bench/README.md), and one crash must not cost the peer's numbers
for every scenario after it. A Cedarberg crash is a failure and is never papered over.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType

from bench.endpoint import Endpoint

# Each start of the peer (a fresh data directory and the fixtures) takes 5-10 s.
MAX_RESTARTS = 3


class Restarting:
    """``start(n)`` starts the server for the n-th time (0 first; a fresh data directory each
    time, so the old one stays for the post-mortem); ``restart()`` stops what is left of the
    current one and starts the next, at most ``limit`` times."""

    def __init__(
        self, start: Callable[[int], AbstractContextManager[Endpoint]], limit: int = MAX_RESTARTS
    ) -> None:
        self._start = start
        self._stack = contextlib.ExitStack()
        self.limit = limit
        self.restarts = 0
        self._endpoint: Endpoint | None = None

    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            raise RuntimeError("the server is not running")
        return self._endpoint

    @property
    def running(self) -> bool:
        """False once a restart failed."""
        return self._endpoint is not None

    def can_restart(self) -> bool:
        return self.restarts < self.limit

    def restart(self) -> Endpoint:
        """Stop the current server (its pid, if it still runs) and start a fresh one."""
        self._endpoint = None
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.restarts += 1
        self._endpoint = self._stack.enter_context(self._start(self.restarts))
        return self._endpoint

    def __enter__(self) -> Endpoint:
        self._endpoint = self._stack.enter_context(self._start(0))
        return self._endpoint

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._endpoint = None
        self._stack.close()
