"""A durable wait on stdout writes the pending lines itself when that cannot block
(gateway/audit_writer.py, `_write_here`), and hands them to the writer thread otherwise.

Stdout is a real pipe or a real file here (the process's `sys.stdout` swapped for one over its
descriptor). The control: a mutation's lines are written on the event loop's thread, whole and
in order, without waking the writer thread. The attacks on "never blocks the loop": a full pipe
and a batch larger than a pipe takes at once both go to the thread, and the loop keeps running
meanwhile; and a record with no durable wait after it (a read) is still written promptly.
"""

from __future__ import annotations

import asyncio
import io
import os
import select
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from cedarberg.gateway.audit import AuditLog
from cedarberg.gateway.audit_writer import AuditWriter
from cedarberg.gateway.config.audit import AuditSettings
from tests.support.audit import mutation_event

DEADLINE_SECONDS = 5.0


class _Pipe:
    """A pipe for `sys.stdout`: `install()` in the test's body (pytest's capture puts its own
    stream back when the test starts), the read end non-blocking."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        raw = io.FileIO(self.write_end, "w", closefd=False)
        self._stream = io.TextIOWrapper(io.BufferedWriter(raw), write_through=True)
        self._monkeypatch = monkeypatch

    def install(self) -> None:
        self._monkeypatch.setattr(sys, "stdout", self._stream)

    def read(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self.read_end, 65536)
            except BlockingIOError:
                return b"".join(chunks)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Pipe]:
    made = _Pipe(monkeypatch)
    yield made
    monkeypatch.undo()  # stdout back before the pipe closes
    os.close(made.read_end)
    os.close(made.write_end)


def _line(name: str, size: int) -> bytes:
    """A JSON line of exactly `size` bytes."""
    head = orjson.dumps({"request_id": name, "pad": ""})[:-2]
    return head + b"x" * (size - len(head) - 3) + b'"}\n'


def _ids(data: bytes) -> list[str]:
    return [orjson.loads(line)["request_id"] for line in data.splitlines()]


@pytest.fixture
def write_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every write to stdout, in order."""
    threads: list[int] = []
    real = AuditWriter._write_stdout

    def tracked(writer: AuditWriter) -> None:
        if writer._backlog:
            threads.append(threading.get_ident())
        real(writer)

    monkeypatch.setattr(AuditWriter, "_write_stdout", tracked)
    return threads


async def test_a_mutation_on_a_pipe_is_written_by_its_own_thread_in_order(
    pipe: _Pipe, write_threads: list[int]
) -> None:
    pipe.install()
    log = AuditLog.open(AuditSettings())
    try:
        for n in range(20):  # a decision, then the outcome, each made durable: as a mutation does
            log.record(mutation_event(f"decision-{n}"))
            await log.durable()
            log.record(mutation_event(f"outcome-{n}"))
            await log.durable()
        assert _ids(pipe.read()) == [f"{kind}-{n}" for n in range(20) for kind in ("decision", "outcome")]
        assert set(write_threads) == {threading.get_ident()}  # never handed to the writer thread
    finally:
        log.close()


async def test_a_full_pipe_goes_to_the_writer_and_the_loop_runs_on(
    pipe: _Pipe, write_threads: list[int]
) -> None:
    pipe.install()
    log = AuditLog.open(AuditSettings())
    write_end = pipe.write_end
    os.set_blocking(write_end, False)
    filled = 0
    try:
        while True:
            filled += os.write(write_end, b"\n" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    assert not select.select((), (write_end,), (), 0)[1]  # no room: a write now would block
    try:
        log.record(mutation_event("blocked"))
        durable = asyncio.ensure_future(log.durable())
        ticks = 0
        while ticks < 20:  # the loop is not held by the durable wait
            await asyncio.sleep(0.01)
            ticks += 1
        assert not durable.done()
        drained = b""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not durable.done():
            assert time.monotonic() < deadline, "the writer never wrote the line once the pipe had room"
            drained += pipe.read()
            await asyncio.sleep(0.01)
        await durable
        drained += pipe.read()
        assert _ids(drained[filled:]) == ["blocked"]
        assert write_threads
        assert threading.get_ident() not in write_threads
    finally:
        log.close()


async def test_more_than_a_pipe_takes_at_once_goes_to_the_writer_whole_and_in_order(
    pipe: _Pipe, write_threads: list[int]
) -> None:
    pipe.install()
    writer = AuditWriter(AuditSettings())  # lines as the log makes them, one of 3 pipe buffers
    lines = [_line("small-1", 500), _line("large", 3 * select.PIPE_BUF), _line("small-2", 500)]
    try:
        for line in lines:
            writer.put(line)
        await writer.durable()  # in the step that put them, as a mutation does (the pipe has room)
        data = pipe.read()
        assert data == b"".join(lines)  # whole, in order
        # The first line fit and went at once; the rest was the writer thread's.
        assert write_threads[0] == threading.get_ident()
        assert len(write_threads) == 2
        assert write_threads[1] != threading.get_ident()
    finally:
        writer.close()


async def test_a_record_without_a_durable_wait_is_written_promptly(pipe: _Pipe) -> None:
    pipe.install()
    log = AuditLog.open(AuditSettings())
    try:
        await asyncio.sleep(0.05)  # the writer is idle
        log.record(mutation_event("a-read"))  # no durable wait follows
        data = b""
        deadline = time.monotonic() + 1.0
        while b"\n" not in data:
            assert time.monotonic() < deadline, "the idle writer was not woken for the record"
            await asyncio.sleep(0.01)
            data += pipe.read()
        assert _ids(data) == ["a-read"]
    finally:
        log.close()


async def test_stdout_redirected_to_a_file_is_written_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_threads: list[int]
) -> None:
    path = tmp_path / "gateway.log"
    with path.open("wb") as file:
        stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(file.fileno(), "w", closefd=False)))
        monkeypatch.setattr(sys, "stdout", stream)
        log = AuditLog.open(AuditSettings())
        try:
            log.record(mutation_event("to-file"))
            await log.durable()
            assert _ids(path.read_bytes()) == ["to-file"]  # durable: in the file now
            assert write_threads == [threading.get_ident()]
        finally:
            log.close()
