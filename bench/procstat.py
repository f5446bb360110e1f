"""CPU time and resident memory of a server process and all its descendants, from /proc.

A gateway started with ``--workers 2`` is a supervisor plus forked workers; its cost is the sum
over the whole tree, found by following the ``ppid`` field of every ``/proc/*/stat``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3, ``state``, is index 0)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text.rsplit(")", 1)[1].split()


def process_tree(root: int) -> list[int]:
    """``root`` and every live descendant of it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time of ``pids`` (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / TICKS_PER_SECOND


def machine_busy_seconds() -> float:
    """CPU time all cores spent busy since boot (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS_PER_SECOND


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def rss_bytes(pids: Iterable[int]) -> int:
    """Resident set size of ``pids``, summed."""
    pages = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            pages += int(fields[21])  # rss, in pages
    return pages * PAGE_BYTES


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds of a process tree at one moment."""

    pids: tuple[int, ...]
    cpu: float


class ServerMeter:
    """Measures one server's process tree around a load run::

    meter = ServerMeter(pid)
    start = meter.snapshot()
    ...                                  # the load
    used = meter.cpu_since(start)        # CPU seconds of the tree (pids seen at either end)
    meter.rss()                          # bytes, now
    """

    def __init__(self, root: int) -> None:
        self.root = root

    def snapshot(self) -> Snapshot:
        pids = tuple(process_tree(self.root))
        return Snapshot(pids, cpu_seconds(pids))

    def cpu_since(self, start: Snapshot) -> float:
        """CPU seconds used by the tree since ``start`` (pids seen at either end; a server under
        load neither forks nor reaps workers, so none is lost in between)."""
        pids = set(start.pids) | set(process_tree(self.root))
        return cpu_seconds(pids) - start.cpu

    def rss(self) -> int:
        return rss_bytes(process_tree(self.root))


def loaded_event_loop(root: int) -> str:
    """``uvloop`` if any process of the tree has uvloop's extension mapped, else ``asyncio``."""
    for pid in process_tree(root):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        if "/uvloop/" in maps:
            return "uvloop"
    return "asyncio"
