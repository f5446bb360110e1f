"""Where a scenario's server CPU goes, thread by thread: a gateway as `make bench` runs it, one
scenario under wrk, and the CPU and voluntary context switches of every thread of every process
of the gateway, per request.

    python -m bench.thread_cpu [--workers N] [--store sqlite|postgresql] [--seconds S] OPERATION...

OPERATION is a scenario key of bench/scenarios.py (`create_namespace_8`, `commit_seq`, ...).
Threads are named by process role (supervisor, registry writer, worker) and `main` or their
thread id. A worker that serves no requests shows no CPU: how evenly the workers share the load
is the first thing it answers (docs/performance.md, "Two workers served concurrent clients on
one"); context switches per request count the hand-offs a request makes.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import cedarberg, measure, scenarios
from bench.endpoint import Endpoint
from bench.model import Scenario
from bench.procstat import TICKS_PER_SECOND, process_tree

_WRITER_STARTED = re.compile(r"registry writer started \(pid (\d+)\)")


@dataclass(frozen=True)
class ThreadUse:
    """CPU seconds and voluntary context switches of one thread so far."""

    cpu_seconds: float
    switches: int


def thread_use(pid: int) -> dict[int, ThreadUse]:
    """Every thread of process `pid` (by thread id), from /proc; empty if it has exited."""
    used: dict[int, ThreadUse] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return used
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        switches = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("voluntary_ctxt_switches")
        )
        used[int(tid)] = ThreadUse((int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND, switches)
    return used


def _roles(root: int, log_text: str) -> dict[int, str]:
    writers = {int(pid) for pid in _WRITER_STARTED.findall(log_text)}
    roles = {}
    workers = 0
    for pid in process_tree(root):
        if pid == root:
            roles[pid] = "supervisor" if len(process_tree(root)) > 1 else "gateway"
        elif pid in writers:
            roles[pid] = "registry writer"
        else:
            roles[pid] = f"worker {workers}"
            workers += 1
    return roles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.thread_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("operations", nargs="+", choices=sorted(scenarios.BY_NAME), metavar="OPERATION")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--seconds", type=int, default=5, help="measured seconds per operation (1-60)")
    args = parser.parse_args(argv)
    seconds = max(1, min(args.seconds, 60))
    store = cedarberg.SQLITE if args.store == "sqlite" else cedarberg.POSTGRES
    operations = tuple(args.operations)
    variant = cedarberg.Variant(tls=False, workers=args.workers, store=store, operations=operations)
    with (
        tempfile.TemporaryDirectory(prefix="cedarberg-thread-cpu-") as work,
        cedarberg.running_cedarberg(Path(work), variant, tls_pki=None) as endpoint,
    ):
        for name in operations:
            _measure(endpoint, variant, name, seconds)
    return 0


def _measure(endpoint: Endpoint, variant: cedarberg.Variant, name: str, seconds: int) -> None:
    operation = scenarios.BY_NAME[name]
    scenario = Scenario(
        "cedarberg", variant.name, name, operation.title, variant.workers, False, operation.connections
    )
    prepared = measure.prepare(endpoint, operation, scenario)
    if prepared is None:
        raise SystemExit(f"{name}: {scenario.error}")
    measure.wrk_run(endpoint, prepared, 1)  # warm-up
    pids = process_tree(endpoint.pid)
    before = {pid: thread_use(pid) for pid in pids}
    result = measure.wrk_run(endpoint, prepared, seconds)
    after = {pid: thread_use(pid) for pid in pids}
    roles = _roles(endpoint.pid, endpoint.log_path.read_text() if endpoint.log_path else "")
    requests = max(result.requests, 1)
    rate, p50_ms = result.requests / result.duration_s, result.latency_us["p50"] / 1000
    print(f"{name} on {variant.name}: {rate:,.0f} req/s, p50 {p50_ms:.2f} ms")
    total = 0.0
    rows = []
    for pid in pids:
        for tid, end in after[pid].items():
            start = before[pid].get(tid, ThreadUse(0.0, 0))
            cpu = end.cpu_seconds - start.cpu_seconds
            total += cpu
            if cpu > 0:
                thread = "main" if tid == pid else f"thread {tid}"
                rows.append(
                    (cpu, f"{roles.get(pid, pid)} (pid {pid}), {thread}", end.switches - start.switches)
                )
    for cpu, label, switches in sorted(rows, reverse=True):
        print(f"  {label:48s} {cpu / requests * 1e6:7,.0f} µs/req  {switches / requests:5.2f} switches/req")
    print(f"  {'all':48s} {total / requests * 1e6:7,.0f} µs/req")


if __name__ == "__main__":
    raise SystemExit(main())
