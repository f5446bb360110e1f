"""The SQLite registry's one thread for what may block: COMMIT (which syncs the WAL) and opening
a connection. Lighter than an executor: a queue in, `call_soon_threadsafe` out, so a write
transaction's one crossing costs as little as a crossing can."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")


def settle(future: asyncio.Future[Any], error: BaseException | None, value: Any) -> None:
    """Complete `future` unless it is done already (its waiter may have given up)."""
    if not future.done():
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


class CommitThread:
    """Runs jobs one after another on its thread (started on first use, stopped by `stop`)."""

    def __init__(self) -> None:
        self._jobs: SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any]] | None] = (
            SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="registry-commit", daemon=True)
            self._thread.start()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((fn, args, future))
        return future

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args, future = job
            error: BaseException | None = None
            value = None
            try:
                value = fn(*args)
            except BaseException as err:  # handed to the waiting task
                error = err
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                future.get_loop().call_soon_threadsafe(settle, future, error, value)

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
