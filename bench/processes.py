"""Start and stop the servers the suite measures (each its own process, on loopback)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

STOP_TIMEOUT_SECONDS = 15.0
_ARGUMENTS = re.compile(r"\([^()]*\)$")


def spawn(
    argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with stdout and stderr going to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(  # noqa: S603 - argv built by this suite, no shell
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds (only this process, by its pid)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)


def wait_until(ready: Callable[[], bool], timeout: float, what: str, alive: Callable[[], bool]) -> None:
    """Poll ``ready()`` every 0.1 s until it is true; raise if ``alive()`` turns false or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise RuntimeError(f"{what} exited before it was ready")
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(0.1)


def log_tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return ""


def crash_excerpt(path: Path, frames: int = 5) -> str:
    """What a crashed Go server said: its ``panic:`` (or ``fatal error:``) line and the first
    ``frames`` functions of the crashing goroutine's stack (``f <- its caller``), else the end
    of its log."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    starts = [i for i, line in enumerate(lines) if line.startswith(("panic:", "fatal error:"))]
    if not starts:
        return log_tail(path, 600)
    calls: list[str] = []
    for line in lines[starts[-1] + 1 :]:
        if len(calls) == frames:
            break
        if line and not line[0].isspace() and "(" in line and not line.startswith(("goroutine", "[")):
            # "github.com/x/y/pkg.(*T).F(0x0, ...)" -> "pkg.(*T).F"
            calls.append(_ARGUMENTS.sub("", line.rsplit("/", 1)[-1]))
    return f"{lines[starts[-1]]} in {' <- '.join(calls)}" if calls else lines[starts[-1]]
