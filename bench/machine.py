"""A description of the machine and software a run was measured on."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, which a container or ``taskset``
    narrows; ``os.cpu_count()`` counts the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def describe(versions: dict[str, str]) -> dict[str, Any]:
    import aiohttp

    try:
        uvloop_version = importlib.metadata.version("uvloop")
    except importlib.metadata.PackageNotFoundError:
        uvloop_version = "not installed"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "usable_cores": usable_cores(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(_memory_gib(), 1),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "aiohttp": aiohttp.__version__,
        "uvloop": uvloop_version,
        **versions,
    }


def filesystem_of(path: Path) -> str:
    """The file system holding ``path``, e.g. ``ext4 on /dev/vda (/)``: where the servers' files
    and their fsyncs go (on tmpfs an fsync costs nothing and proves nothing)."""
    best = ("", "unknown", "unknown")
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            device, mount_point, kind = line.split()[:3]
            inside = path == Path(mount_point) or Path(mount_point) in path.resolve().parents
            if inside and len(mount_point) >= len(best[0]):
                best = (mount_point, kind, device)
    except (OSError, ValueError):
        pass
    return f"{best[1]} on {best[2]} ({best[0] or '?'})"
