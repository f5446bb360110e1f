"""Sixteen pyiceberg writers appending to one table at once, against both registry stores.

Each writer reloads and retries on ``CommitFailedException`` (bounded attempts and time). The
gateway's commit is a compare-and-swap, so every append must land exactly once, the snapshot
history must be one linear chain with strictly increasing sequence numbers, and no metadata file
may be lost (a log entry without a file) or orphaned (a file the log does not name, e.g. one written
by a commit that lost the race).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.support.engines import make_catalog
from tests.support.gateway import GatewayProcess
from tests.support.redis import RedisServer

WRITERS = 16
APPENDS_PER_WRITER = 3
# An attempt fails only if another append landed in between, and only WRITERS * APPENDS_PER_WRITER
# appends exist, so this many attempts always suffice for a correct compare-and-swap.
MAX_ATTEMPTS = WRITERS * APPENDS_PER_WRITER + 16
DEADLINE_SECONDS = 200.0
IDENTIFIER = "conc.events"

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "writer", LongType(), required=False),
    NestedField(3, "payload", StringType(), required=False),
)


def batch(writer: int, index: int) -> pa.Table:
    """Rows of one append; ids are unique across all writers and batches."""
    count = 1 + (writer + index) % 5
    base = (writer * APPENDS_PER_WRITER + index) * 100
    ids = list(range(base, base + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "writer": pa.array([writer] * count, pa.int64()),
            "payload": pa.array([f"w{writer}-b{index}-{i}" for i in ids], pa.string()),
        }
    )


def local_path(location: str) -> Path:
    parsed = urllib.parse.urlparse(location)
    assert parsed.scheme in ("", "file"), location
    return Path(urllib.parse.unquote(parsed.path))


@dataclass
class Outcome:
    successes: list[tuple[int, int, int, int]] = field(default_factory=list)  # writer, batch, rows, snapshot
    gave_up: list[tuple[int, int, str]] = field(default_factory=list)
    conflicts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_writer(gateway: Any, writer: int, start: threading.Barrier, deadline: float, out: Outcome) -> None:
    catalog = make_catalog(gateway)
    try:
        table = catalog.load_table(IDENTIFIER)
        rng = random.Random(writer)
        start.wait(timeout=60)
        for index in range(APPENDS_PER_WRITER):
            data = batch(writer, index)
            tag = {"cedarberg.writer": str(writer), "cedarberg.batch": str(index)}
            for attempt in range(MAX_ATTEMPTS):
                if time.monotonic() > deadline:
                    with out.lock:
                        out.gave_up.append((writer, index, f"deadline after {attempt} attempts"))
                    return
                try:
                    table.append(data, snapshot_properties=tag)
                except CommitFailedException:
                    with out.lock:
                        out.conflicts += 1
                    time.sleep(rng.uniform(0, 0.01 * min(attempt + 1, 8)))
                    table = catalog.load_table(IDENTIFIER)
                    continue
                # The commit response is the metadata right after this commit: main is ours.
                mine = table.current_snapshot()
                assert mine is not None
                assert mine.summary is not None
                assert mine.summary["cedarberg.writer"] == str(writer), mine.summary
                assert mine.summary["cedarberg.batch"] == str(index), mine.summary
                with out.lock:
                    out.successes.append((writer, index, data.num_rows, mine.snapshot_id))
                break
            else:
                with out.lock:
                    out.gave_up.append((writer, index, f"{MAX_ATTEMPTS} attempts"))
                return
    finally:
        catalog.close()


def run_writers(gateways: list[Any]) -> tuple[Outcome, float]:
    """Start WRITERS writers at once, writer ``w`` talking to ``gateways[w % len(gateways)]``."""
    out = Outcome()
    start = threading.Barrier(WRITERS)
    began = time.monotonic()
    deadline = began + DEADLINE_SECONDS
    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        futures = [
            pool.submit(run_writer, gateways[w % len(gateways)], w, start, deadline, out)
            for w in range(WRITERS)
        ]
        errors = [f.exception() for f in futures]
    elapsed = time.monotonic() - began
    unexpected = [e for e in errors if e is not None]
    assert not unexpected, f"writers failed with unexpected errors: {unexpected!r}"
    assert not out.gave_up, f"appends gave up: {out.gave_up} ({out.conflicts} conflicts, {elapsed:.1f}s)"
    assert len(out.successes) == WRITERS * APPENDS_PER_WRITER
    return out, elapsed


def create_table(gateway: Any) -> None:
    catalog = make_catalog(gateway)
    catalog.create_namespace("conc")
    # pyiceberg 0.12 would retry conflicts itself; the writers here do it, so every 409 is seen.
    catalog.create_table(IDENTIFIER, schema=SCHEMA, properties={"commit.retry.num-retries": "0"})
    catalog.close()


def test_sixteen_concurrent_writers(store_gateway: Any) -> None:
    create_table(store_gateway)
    out, _elapsed = run_writers([store_gateway])
    check_table(store_gateway, out)


def test_sixteen_writers_through_two_gateways_on_one_postgres(postgres_url: str, tmp_path: Path) -> None:
    """Two gateway processes share one PostgreSQL registry, one Redis (rate limits) and one data
    dir, as two instances behind a load balancer: the compare-and-swap must hold across processes,
    not just inside one, and lost races must reach the writers as 409s they retry."""
    redis = RedisServer()
    redis.start()
    limits = {key: "1000000/minute" for key in ("per_address", "read", "write", "admin", "token")}
    config = {"rate_limits": {"storage_uri": redis.url, **limits}}
    data_dir = tmp_path / "shared"
    first = GatewayProcess(data_dir, store_url=postgres_url, config=config, log_path=tmp_path / "gw1.log")
    second = GatewayProcess(data_dir, store_url=postgres_url, config=config, log_path=tmp_path / "gw2.log")
    try:
        with first, second:
            try:
                create_table(first)
                out, _elapsed = run_writers([first, second])
                assert out.conflicts > 0  # sixteen writers on one table do collide; each was retried
                check_table(first, out)
                check_table(second, out)
            except BaseException:
                for gw in (first, second):
                    print(f"--- {gw.log_path} (tail) ---\n{gw.log_text()[-4000:]}")
                raise
    finally:
        redis.stop()


def check_table(gateway: Any, out: Outcome) -> None:
    catalog = make_catalog(gateway)
    table = catalog.load_table(IDENTIFIER)
    snapshots = {s.snapshot_id: s for s in table.snapshots()}

    # Every successful append is in the history, exactly once, under the id its writer saw.
    tags = Counter(
        (s.summary["cedarberg.writer"], s.summary["cedarberg.batch"]) for s in snapshots.values() if s.summary
    )
    assert all(n == 1 for n in tags.values()), f"an append landed twice: {tags}"
    for writer, index, _rows, snapshot_id in out.successes:
        assert snapshot_id in snapshots, f"append {writer}/{index} ({snapshot_id}) is missing"
        assert snapshots[snapshot_id].summary["cedarberg.writer"] == str(writer)
        assert snapshots[snapshot_id].summary["cedarberg.batch"] == str(index)
    assert len(snapshots) == len(out.successes)

    # One linear chain from the current snapshot back to the first; sequence numbers increase.
    chain = []
    current = table.current_snapshot()
    while current is not None:
        chain.append(current)
        current = snapshots.get(current.parent_snapshot_id) if current.parent_snapshot_id else None
    chain.reverse()
    assert {s.snapshot_id for s in chain} == set(snapshots)
    sequence_numbers = [s.sequence_number for s in chain]
    assert all(a < b for a, b in itertools.pairwise(sequence_numbers)), sequence_numbers
    assert table.metadata.last_sequence_number == sequence_numbers[-1]
    log = [entry.snapshot_id for entry in table.metadata.snapshot_log]
    assert log == [s.snapshot_id for s in chain]

    # All rows, no more, no fewer.
    expected_rows = sum(rows for _w, _b, rows, _s in out.successes)
    data = table.scan().to_arrow()
    assert data.num_rows == expected_rows
    expected_ids = sorted(i for w, b, _r, _s in out.successes for i in batch(w, b).column("id").to_pylist())
    assert sorted(data.column("id").to_pylist()) == expected_ids
    assert table.current_snapshot().summary["total-records"] == str(expected_rows)

    # Metadata files: none lost, none orphaned.
    current_file = local_path(table.metadata_location)
    metadata_dir = current_file.parent
    logged = {local_path(entry.metadata_file) for entry in table.metadata.metadata_log}
    assert len(table.metadata.metadata_log) == len(out.successes)  # one per commit after the create
    assert current_file not in logged
    missing = sorted(str(p) for p in logged | {current_file} if not p.is_file())
    assert not missing, f"metadata files named by the table but absent: {missing}"
    on_disk = {p for p in metadata_dir.iterdir() if ".metadata.json" in p.name}
    orphans = sorted(str(p) for p in on_disk - logged - {current_file})
    assert not orphans, f"{len(orphans)} metadata files not in the metadata log, e.g. {orphans[:3]}"
    catalog.close()
