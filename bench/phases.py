"""Group a py-spy raw profile of the gateway by what the main thread was doing.

    py-spy record -r 250 --nonblocking -d 10 -f raw -o profile.txt -p <gateway pid>   # under load
    python -m bench.phases profile.txt

Each main-thread sample goes to the first group (in the order below) that one of its frames
belongs to; samples waiting in the event loop's poll are idle. Samples of other threads (the
SQLite commit thread, file writes with their fsyncs, the audit writer) are listed apart, relative
to the main thread's busy samples. docs/performance.md ("Where the time goes") shows its output for
the write loads.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Cedar decision (cedarpy, entities JSON)", ("cedarpy", "authz/engine.py")),
    ("audit record", ("gateway/audit.py", "gateway/audit_writer.py")),
    (
        "registry SQL (driver, statements)",
        (
            "sqlite_driver",
            "postgres_driver",
            "store/statements",
            "asyncpg",
            *(f"store/{table}.py" for table in ("namespaces", "objects", "idempotency", "dropped", "keys")),
            "store/metrics.py",
            "store/pool.py",
        ),
    ),
    ("file write hand-off (to_thread)", ("fileio.py", "asyncio/threads.py")),
    (
        "metadata: open, apply updates, plan effects",
        ("table_metadata.py", "table_changes.py", "pyiceberg", "catalog/effects.py"),
    ),
    (
        "serialise and seal metadata",
        ("documents.py", "sealing.py", "envelope.py", "orjson", "model_dump_json"),
    ),
    (
        "Cedar resources and grants",
        ("web/resources.py", "authz/naming.py", "authz/entities.py", "resource_memo"),
    ),
    ("request body (pydantic)", ("web/http.py", "pydantic")),
    (
        "pipeline (authentication, limits, ids, metrics)",
        ("middlewares.py", "web/answers.py", "web/exchange.py", "authn/", "ratelimit.py", "replay.py"),
    ),
    ("aiohttp", ("aiohttp",)),
)
OTHER_THREADS = (
    ("commit thread (SQLite COMMIT and its sync)", "commit_thread"),
    ("audit writer", "gateway/audit_"),  # audit_writer.py (the thread), audit_file.py
    ("file writes and their fsyncs", "fileio"),
)


def _idle(frames: list[str]) -> bool:
    leaf = frames[-1]
    return leaf.startswith("run_worker") or "select" in leaf or "poll" in leaf


def summarise(lines: list[str]) -> str:
    main: collections.Counter[str] = collections.Counter()
    other: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        if stack.startswith("Thread._bootstrap"):
            name = next((n for n, key in OTHER_THREADS if key in stack), "other threads")
            other[name] += samples
            continue
        total += samples
        if _idle(stack.split(";")):
            idle += samples
            continue
        name = next((n for n, keys in GROUPS if any(key in stack for key in keys)), "event loop, asyncio")
        main[name] += samples
    busy = total - idle
    if not busy:
        return "no busy main-thread samples"
    out = [f"main thread: {total} samples, {100 * idle / total:.0f}% idle"]
    out += [f"  {100 * n / busy:5.1f}%  {name}" for name, n in main.most_common()]
    out.append("other threads, relative to the main thread's busy samples:")
    out += [f"  {100 * n / busy:5.1f}%  {name}" for name, n in other.most_common()]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profile", type=Path, help="py-spy's raw output (-f raw)")
    args = parser.parse_args()
    print(summarise(args.profile.read_text(errors="replace").splitlines()))


if __name__ == "__main__":
    main()
