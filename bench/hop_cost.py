"""What waking another process costs on this machine: two processes hand a byte back and forth
over two pipes, once free to run on any processor and once both pinned to one.

    python -m bench.hop_cost [--round-trips N]

Prints round trips per second and the CPU each side spends per round trip. A write through the
gateway crosses threads and processes several times (docs/performance.md, "What a hop between
processors costs on this machine"); on a KVM guest a wake-up on the other processor costs far
more than one on the same processor.
"""

from __future__ import annotations

import argparse
import os
import time


def _round_trips(count: int, cpus: set[int] | None) -> tuple[float, float, float]:
    """(round trips per second, parent CPU µs per round trip, child CPU µs per round trip)."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: echo every byte back
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        for _ in range(count):
            os.read(to_child_r, 1)
            os.write(to_parent_w, b"x")
        os._exit(0)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    children_before = os.times()
    began, cpu_began = time.perf_counter(), time.process_time()
    for _ in range(count):
        os.write(to_child_w, b"x")
        os.read(to_parent_r, 1)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    os.waitpid(pid, 0)
    children = os.times()
    child_cpu = (children.children_user - children_before.children_user) + (
        children.children_system - children_before.children_system
    )
    for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
        os.close(fd)
    return count / elapsed, cpu / count * 1e6, child_cpu / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--round-trips", type=int, default=20_000, help="round trips per layout (20,000)")
    args = parser.parse_args()
    count = max(1, min(args.round_trips, 1_000_000))  # a bounded loop
    allowed = sorted(os.sched_getaffinity(0))
    original = set(allowed)
    layouts: list[tuple[str, set[int] | None]] = [("any processor", None), ("one processor", {allowed[0]})]
    try:
        for label, cpus in layouts:
            rate, parent_us, child_us = _round_trips(count, cpus)
            print(
                f"{label:>14}: {rate:,.0f} round trips/s, CPU per round trip "
                f"{parent_us:.1f} µs (parent) + {child_us:.1f} µs (child)"
            )
    finally:
        os.sched_setaffinity(0, original)


if __name__ == "__main__":
    main()
