"""The registry's drivers (catalog.store.sqlite_driver, catalog.store.postgres_driver) on real
databases: the event loop keeps serving while another process holds SQLite's write lock, a lock
held past the timeout is StorageUnavailableError, COMMIT runs off the loop, PostgreSQL statements
are prepared once per connection, a lost connection is replaced, and a transaction that fails
midway leaves the registry as it was."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy import Integer, String, column, text

from cedarberg.catalog.errors import AlreadyExistsError, StorageUnavailableError
from cedarberg.catalog.store import namespaces as namespace_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import sqlite_driver
from cedarberg.catalog.store.connect import open_store
from cedarberg.catalog.store.engine import migrate_registry
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.catalog.store.postgres_driver import DIALECT as POSTGRES
from cedarberg.catalog.store.sqlite_driver import SqliteDriver
from cedarberg.catalog.store.statements import Sql
from cedarberg.catalog.store.tx import StoreTx
from tests.support.postgres import PostgresServer

# Holds SQLite's write lock on the file named by argv[1] until stdin closes: another gateway
# worker (or a CLI command) in the middle of a long write.
_LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""


def _row(name: str = "t", location: str = "s3://b/t/metadata/0.json") -> ObjectRow:
    return ObjectRow(
        "w", "ns", name, "table", str(uuid.uuid4()), location, b"sealed", 1, "local:k", "1", b"k"
    )


def _url(store_url: str | None, tmp_path: Path) -> str:
    return store_url or f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[tuple[Store, Path]]:
    """A store on a fresh SQLite registry whose writers wait at most 0.5 s for the lock."""
    path = tmp_path / "registry.db"
    await migrate_registry(f"sqlite+aiosqlite:///{path}")
    store = Store(SqliteDriver(str(path), busy_timeout=0.5))
    try:
        yield store, path
    finally:
        await store.close()


class _LockHolder:
    """Another process holding the registry's write lock (context manager)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> _LockHolder:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _LOCK_HOLDER, str(self._path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        assert self._process.stdout.readline().strip() == "locked"
        return self

    def release(self) -> None:
        if self._process is not None and self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            assert self._process.wait(timeout=10) == 0

    def __exit__(self, *exc: object) -> None:
        self.release()


async def _largest_gap(seconds: float) -> float:
    """Tick every 5 ms for `seconds`; the longest the loop kept a tick waiting."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    last = loop.time()
    gap = 0.0
    while loop.time() < end:
        await asyncio.sleep(0.005)
        now = loop.time()
        gap, last = max(gap, now - last), now
    return gap


async def test_the_loop_keeps_serving_while_another_process_holds_the_write_lock(
    sqlite_store: tuple[Store, Path],
) -> None:
    store, path = sqlite_store
    async with store.write() as tx:
        await namespace_rows.insert_namespace(tx, "w", "before", None, {})

    async def create_namespace() -> None:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "during", None, {})

    with _LockHolder(path) as holder:
        writer = asyncio.create_task(create_namespace())
        gap = await _largest_gap(0.25)
        async with store.read() as tx:  # readers are not blocked by the writer waiting
            assert await namespace_rows.get_namespace(tx, "w", "before") == {}
        assert not writer.done(), "the write must wait for the other process's lock"
        holder.release()
        await asyncio.wait_for(writer, 5)
    assert gap < 0.1, f"the loop stalled for {gap:.3f} s while waiting for the lock"
    driver = store._driver
    assert isinstance(driver, SqliteDriver)
    assert driver.counts.busy_waits > 0  # the count that shows workers sharing a writer never wait
    async with store.read() as tx:
        assert await namespace_rows.get_namespace(tx, "w", "during") == {}


async def test_a_lock_held_past_the_timeout_is_storage_unavailable_and_changes_nothing(
    sqlite_store: tuple[Store, Path],
) -> None:
    store, path = sqlite_store
    loop = asyncio.get_running_loop()
    with _LockHolder(path):
        started = loop.time()
        gap_task = asyncio.create_task(_largest_gap(0.4))
        with pytest.raises(StorageUnavailableError) as caught:
            async with store.write() as tx:
                await namespace_rows.insert_namespace(tx, "w", "never", None, {})
        waited = loop.time() - started
        gap = await gap_task
    assert 0.45 <= waited < 3, waited
    assert gap < 0.1, gap
    assert "locked" not in str(caught.value)  # the driver's message stays inside
    async with store.read() as tx:
        assert await namespace_rows.get_namespace(tx, "w", "never") is None
    async with store.write() as tx:  # the lock is free again: writes work
        await namespace_rows.insert_namespace(tx, "w", "after", None, {})


async def test_commit_runs_on_the_commit_thread_and_other_statements_on_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    await migrate_registry(f"sqlite+aiosqlite:///{path}")
    driver = SqliteDriver(str(path))
    store = Store(driver)
    seen: list[tuple[str, int]] = []
    try:
        async with store.write() as tx:
            writer = driver._writer
            assert writer is not None
            writer.set_trace_callback(
                lambda sql: seen.append((sql.split()[0].upper(), threading.get_ident()))
            )
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
        writer.set_trace_callback(None)
    finally:
        await store.close()
    loop_thread = threading.get_ident()
    assert [verb for verb, _ in seen] == ["INSERT", "RELEASE", "COMMIT"]
    assert {thread for verb, thread in seen if verb != "COMMIT"} == {loop_thread}
    assert seen[-1][1] != loop_thread


async def test_concurrent_writers_share_commits_and_one_failing_writer_loses_only_its_changes(
    tmp_path: Path,
) -> None:
    """Group commit: writers that wait while a COMMIT syncs join one transaction (each in a
    savepoint) and share the next COMMIT; a writer that fails takes back only its own changes."""
    path = tmp_path / "registry.db"
    await migrate_registry(f"sqlite+aiosqlite:///{path}")
    driver = SqliteDriver(str(path))
    store = Store(driver)
    commits: list[str] = []
    try:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
        assert driver._writer is not None
        driver._writer.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
        before = (driver.counts.commits, driver.counts.transactions)

        async def create(i: int) -> None:
            async with store.write() as tx:
                await object_rows.insert_object(tx, _row(f"t{i}", f"s3://b/t{i}/metadata/0.json"))
                await asyncio.sleep(0)  # let the others queue up behind this writer
                if i == 3:
                    raise RuntimeError("writer 3 fails after its insert")

        outcomes = await asyncio.gather(*(create(i) for i in range(24)), return_exceptions=True)
        driver._writer.set_trace_callback(None)
        counted = (driver.counts.commits - before[0], driver.counts.transactions - before[1])
    finally:
        await store.close()
    assert counted == (len(commits), 23)  # the driver's counts say what the database saw
    assert driver.counts.busy_waits == 0
    failed = [i for i, outcome in enumerate(outcomes) if outcome is not None]
    assert failed == [3]
    assert isinstance(outcomes[3], RuntimeError)
    assert 1 <= len(commits) <= 12, commits  # one per writer would be 23
    reopened = await open_store(f"sqlite+aiosqlite:///{path}")
    try:
        async with reopened.read() as tx:
            names = await object_rows.list_objects(tx, "w", "ns", "table", None, 100)
    finally:
        await reopened.close()
    assert sorted(names) == sorted(f"t{i}" for i in range(24) if i != 3)


async def _create_unless_taken(tx: StoreTx, name: str) -> None:
    if await object_rows.get_object(tx, "w", "ns", name) is not None:
        raise AlreadyExistsError(f"Table already exists: ns.{name}")
    await object_rows.insert_object(tx, _row(name))


async def _group_of_two_writers(driver: SqliteDriver, store: Store) -> tuple[BaseException | None, bool]:
    """Writer A inserts table `t` and writer B, queued behind A in the same group, finds the name
    taken in A's uncommitted change and fails. B's outcome, and whether `t` was committed (read on
    a reader connection, which sees only committed data) at the moment B's failure reached it."""
    a_inserted = asyncio.Event()
    committed_when_b_failed: list[bool] = []
    async with store.read() as tx:  # a reader open before: opening one waits for the commit thread
        assert await object_rows.get_object(tx, "w", "ns", "t") is None

    async def writer_a() -> None:
        async with store.write() as tx:
            await object_rows.insert_object(tx, _row("t"))
            a_inserted.set()
            # B queues behind A, so it joins A's group (the driver's own count says when).
            while driver._waiting == 0:  # noqa: ASYNC110 - no event to wait for inside the driver
                await asyncio.sleep(0)

    async def writer_b() -> None:
        await a_inserted.wait()
        try:
            async with store.write() as tx:
                await _create_unless_taken(tx, "t")
        except BaseException:
            async with store.read() as tx:
                committed_when_b_failed.append(await object_rows.get_object(tx, "w", "ns", "t") is not None)
            raise

    outcomes = await asyncio.gather(writer_a(), writer_b(), return_exceptions=True)
    assert outcomes[0] is None or isinstance(outcomes[0], BaseException)
    return outcomes[1], committed_when_b_failed == [True]


async def _group_of_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commit: Callable[[sqlite3.Connection], None]
) -> tuple[BaseException | None, bool]:
    """`_group_of_two_writers` on a fresh SQLite registry whose group COMMIT runs `commit` in
    place of the driver's `_commit` (a slow or failing COMMIT: no disk here does either on cue)."""
    path = tmp_path / "registry.db"
    await migrate_registry(f"sqlite+aiosqlite:///{path}")
    driver = SqliteDriver(str(path))
    store = Store(driver)
    try:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
        monkeypatch.setattr(sqlite_driver, "_commit", commit)
        return await _group_of_two_writers(driver, store)
    finally:
        await store.close()


async def test_a_writer_failing_on_an_earlier_members_change_answers_only_once_it_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: in a group, a later writer sees the earlier members' uncommitted changes and
    may fail on them (a name taken, an object gone: a retried rename found its source gone). It
    must not answer before those changes are durable, or its client could act on a state that
    is then lost. Here the COMMIT is slow (0.3 s on the commit thread): B's failure reaches it
    only once A's insert is committed, and it is B's own error."""
    real = sqlite_driver._commit

    def slow_commit(conn: sqlite3.Connection) -> None:
        time.sleep(0.3)
        real(conn)

    outcome, committed = await _group_of_two(tmp_path, monkeypatch, slow_commit)
    assert isinstance(outcome, AlreadyExistsError)
    assert committed


async def test_a_writer_failing_on_changes_that_never_commit_fails_as_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control of the rule's other side: when the group's COMMIT fails, the failure B saw
    describes a state that never existed; B answers
    StorageUnavailableError (503, retryable), not its error."""

    def failing_commit(conn: sqlite3.Connection) -> None:
        conn.execute("ROLLBACK")
        raise sqlite3.OperationalError("disk I/O error")

    outcome, committed = await _group_of_two(tmp_path, monkeypatch, failing_commit)
    assert isinstance(outcome, StorageUnavailableError)
    assert "TransactionNotCommitted" in str(outcome)
    assert not committed


async def test_a_transaction_failing_midway_leaves_the_registry_unchanged(
    store_url: str | None, tmp_path: Path
) -> None:
    store = await open_store(_url(store_url, tmp_path))
    try:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
            await object_rows.insert_object(tx, _row("kept"))

        async def fail_on_a_taken_name() -> None:
            async with store.write() as tx:
                await namespace_rows.insert_namespace(tx, "w", "half", None, {})
                base = await object_rows.get_object(tx, "w", "ns", "kept")
                assert base is not None
                assert await object_rows.swap_object(tx, base, "s3://b/t/metadata/1.json", b"new")
                await object_rows.insert_object(
                    tx, _row("kept")
                )  # the name is taken: the whole transaction goes

        async def fail_in_the_caller() -> None:
            async with store.write() as tx:
                await namespace_rows.insert_namespace(tx, "w", "half", None, {})
                raise RuntimeError("the caller failed after its first statement")

        with pytest.raises(AlreadyExistsError):
            await fail_on_a_taken_name()
        with pytest.raises(RuntimeError):
            await fail_in_the_caller()
        async with store.read() as tx:
            assert await namespace_rows.get_namespace(tx, "w", "half") is None
            kept = await object_rows.get_object(tx, "w", "ns", "kept")
        assert kept is not None
        assert kept.metadata_location == "s3://b/t/metadata/0.json"
        # Compare-and-swap: a base read before another writer moved the pointer loses.
        async with store.write() as tx:
            assert await object_rows.swap_object(tx, kept, "s3://b/t/metadata/1.json", b"new")
        async with store.write() as tx:
            assert not await object_rows.swap_object(tx, kept, "s3://b/t/metadata/2.json", b"newer")
    finally:
        await store.close()


_PREPARED = Sql(
    text("SELECT count(*) AS n FROM pg_prepared_statements WHERE statement = :sql").columns(
        column("n", Integer)
    )
)
_BACKEND = Sql(text("SELECT pg_backend_pid() AS pid").columns(column("pid", Integer)))
_SETTING = Sql(text("SHOW synchronous_commit").columns(column("synchronous_commit", String)))


@pytest.mark.postgres
async def test_postgres_statements_are_prepared_once_per_connection(postgres_url: str) -> None:
    store = await open_store(postgres_url)
    try:
        async with store.write() as tx:
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
            await object_rows.insert_object(tx, _row())

        get_object = object_rows._GET_OBJECT.compiled(POSTGRES).sql
        async with store.read() as tx:
            for _ in range(3):
                assert await object_rows.get_object(tx, "w", "ns", "t") is not None
            pid = (await tx.connection.execute(_BACKEND)).scalar_one()
            prepared = (await tx.connection.execute(_PREPARED, {"sql": get_object})).scalar_one()
        assert prepared == 1
        async with store.read() as tx:  # the pooled connection comes back, with its statements
            assert (await tx.connection.execute(_BACKEND)).scalar_one() == pid
            assert (await tx.connection.execute(_PREPARED, {"sql": get_object})).scalar_one() == 1
    finally:
        await store.close()


@pytest.mark.postgres
async def test_a_lost_postgres_connection_fails_one_request_and_is_replaced(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """No pre-ping: the request that finds its connection gone gets StorageUnavailableError (no
    driver message), the connection is dropped, the next request opens a fresh one."""
    store = await open_store(postgres_url)
    try:
        async with store.read() as tx:
            pid = (await tx.connection.execute(_BACKEND)).scalar_one()
        postgres_server.psql(
            f"SELECT pg_terminate_backend({int(pid)})", database=postgres_url.rsplit("/", 1)[1]
        )
        with pytest.raises(StorageUnavailableError) as caught:
            async with store.read() as tx:
                await namespace_rows.get_namespace(tx, "w", "ns")
        assert "terminat" not in str(caught.value).lower()
        async with store.write() as tx:
            assert (await tx.connection.execute(_BACKEND)).scalar_one() != pid
            assert (await tx.connection.execute(_SETTING)).scalar_one() == "on"
            await namespace_rows.insert_namespace(tx, "w", "ns", None, {})
        async with store.read() as tx:
            assert await namespace_rows.get_namespace(tx, "w", "ns") == {}
    finally:
        await store.close()


def test_a_statement_compiles_once_per_dialect() -> None:

    assert object_rows._GET_OBJECT.compiled(POSTGRES) is object_rows._GET_OBJECT.compiled(POSTGRES)
    assert "$1" in object_rows._GET_OBJECT.compiled(POSTGRES).sql
