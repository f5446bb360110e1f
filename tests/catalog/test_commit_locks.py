"""Per-table commit locks: one commit at a time per table, tables side by side, nothing kept."""

from __future__ import annotations

import asyncio

import pytest

from cedarberg.catalog.commit_locks import CommitLocks

A, B = ("w", "ns", "a"), ("w", "ns", "b")


async def test_commits_to_one_table_run_one_at_a_time_and_others_side_by_side() -> None:
    locks = CommitLocks()
    inside: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}

    async def commit(table: str, key: tuple[str, str, str]) -> None:
        async with locks.hold([key]):
            inside[table] += 1
            most[table] = max(most[table], inside[table])
            await asyncio.sleep(0.01)
            inside[table] -= 1

    started = asyncio.get_running_loop().time()
    await asyncio.gather(*(commit("a", A) for _ in range(4)), *(commit("b", B) for _ in range(4)))
    elapsed = asyncio.get_running_loop().time() - started
    assert most == {"a": 1, "b": 1}
    assert elapsed < 0.08, "tables a and b were committed one after the other, not side by side"
    assert len(locks) == 0


async def test_transactions_over_the_same_tables_in_any_order_do_not_deadlock() -> None:
    locks = CommitLocks()

    async def transaction(keys: list[tuple[str, str, str]]) -> None:
        async with locks.hold(keys):
            await asyncio.sleep(0.005)

    await asyncio.wait_for(asyncio.gather(*(transaction([A, B] if i % 2 else [B, A]) for i in range(10))), 5)
    assert len(locks) == 0


async def test_a_cancelled_waiter_leaves_no_lock_behind() -> None:
    locks = CommitLocks()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold([A]):
            await release.wait()

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(transaction_on(locks, [A]))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await held
    assert len(locks) == 0
    await transaction_on(locks, [A])  # the lock is usable again


async def transaction_on(locks: CommitLocks, keys: list[tuple[str, str, str]]) -> None:
    async with locks.hold(keys):
        await asyncio.sleep(0)
