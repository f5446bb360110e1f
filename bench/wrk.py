"""Run ``wrk`` (bounded by ``-d``) with one of the Lua scripts in bench/lua and parse the JSON
line their ``done()`` prints."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LUA_DIR = Path(__file__).resolve().parent / "lua"
READ_SCRIPT = LUA_DIR / "read.lua"
WRITE_SCRIPT = LUA_DIR / "write.lua"
MARKER = "BENCH_JSON "
REQUEST_TIMEOUT_SECONDS = 5  # wrk's per-request timeout; a slower response counts as an error


class WrkError(RuntimeError):
    """wrk failed or printed no result."""


@dataclass(frozen=True)
class WrkResult:
    requests: int  # completed responses (any status)
    duration_s: float
    bytes: int  # response bytes, headers included
    socket_errors: dict[str, int]  # connect/read/write/timeout
    error_statuses: int  # responses with a status above 399 (counted by wrk)
    statuses: dict[int, int] | None  # every status (write script only)
    latency_us: dict[str, float]  # min, mean, p50, p90, p99, p999, max

    @property
    def socket_error_count(self) -> int:
        return sum(self.socket_errors.values())


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise WrkError("wrk is not installed (apt-get install -y wrk; `make bench` does it)")
    return found


def wrk_version() -> str:
    argv = [wrk_binary(), "-v"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)  # noqa: S603
    first = (done.stdout or done.stderr).splitlines()
    return first[0].split(" Copyright")[0] if first else "unknown"


@dataclass(frozen=True, slots=True)
class Load:
    """How hard and how long one wrk run drives the server."""

    threads: int
    connections: int
    duration_s: float


def run_wrk(base_url: str, script: Path, script_args: Sequence[str], load: Load) -> WrkResult:
    """One bounded wrk run against ``base_url`` (the script sets the path) under `load`."""
    threads, connections, duration_s = load.threads, load.connections, load.duration_s
    argv = [
        wrk_binary(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={REQUEST_TIMEOUT_SECONDS}s",
        "-s",
        str(script),
        base_url + "/",
        "--",
        *script_args,
    ]
    try:
        done = subprocess.run(  # noqa: S603 - argv built here, no shell
            argv, capture_output=True, text=True, timeout=duration_s + 60, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise WrkError(f"wrk did not finish within {duration_s + 60:.0f}s") from err
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            return _parse(json.loads(line[len(MARKER) :]))
    raise WrkError(f"wrk exited with {done.returncode} and no result: {(done.stderr or done.stdout)[-500:]}")


def _parse(document: dict[str, object]) -> WrkResult:
    errors = document["errors"]
    latency = document["latency_us"]
    statuses = document["statuses"]
    assert isinstance(errors, dict)
    assert isinstance(latency, dict)
    assert statuses is None or isinstance(statuses, dict)
    return WrkResult(
        requests=int(str(document["requests"])),
        duration_s=int(str(document["duration_us"])) / 1e6,
        bytes=int(str(document["bytes"])),
        socket_errors={key: int(errors[key]) for key in ("connect", "read", "write", "timeout")},
        error_statuses=int(errors["status"]),
        statuses=None if statuses is None else {int(code): int(n) for code, n in statuses.items()},
        latency_us={key: float(value) for key, value in latency.items()},
    )
