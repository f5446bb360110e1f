"""The linearizability checker (tests/support/linearizability.py) on hand-made histories.

Each rejected history breaks one property and must be reported under that property's name; the
accepted ones are what a correct catalog may legitimately produce (concurrent commits in either
order, a timed-out commit present or absent, a multi-table commit on all its tables)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.linearizability import (
    Commit,
    FinalTable,
    History,
    Load,
    Outcome,
    check,
    main,
    worst_staleness,
)


def commit(
    op: str,
    snapshots: Mapping[str, int],
    invoked: float,
    completed: float | None,
    outcome: Outcome = "ack",
) -> Commit:
    return Commit(
        op=op, client=0, snapshots=dict(snapshots), invoked=invoked, completed=completed, outcome=outcome
    )


def load(op: str, table: str, observed: Sequence[int], invoked: float, completed: float) -> Load:
    return Load(op=op, client=1, table=table, observed=list(observed), invoked=invoked, completed=completed)


def final(*chain: int, off_main: Sequence[int] = ()) -> FinalTable:
    return FinalTable(chain=list(chain), snapshots=[*chain, *off_main], snapshot_log=list(chain))


def kinds(history: History) -> list[str]:
    return [violation.kind for violation in check(history)]


def correct_history() -> History:
    """a: 1 then 2 (sequential), 3 and 4 concurrent and applied as 4, 3; a 409'd 5 absent; a
    timed-out 6 present and a timed-out 7 absent; transaction 8/9 on a and b; loads in between."""
    return History(
        seed=1,
        commits=[
            commit("c1", {"a": 1}, 0.0, 1.0),
            commit("c2", {"a": 2}, 2.0, 3.0),
            commit("c3", {"a": 3}, 4.0, 6.0),
            commit("c4", {"a": 4}, 4.5, 5.0),
            commit("c5", {"a": 5}, 4.2, 4.4, "conflict"),
            commit("c6", {"a": 6}, 7.0, None, "timeout"),
            commit("c7", {"b": 7}, 7.0, None, "timeout"),
            commit("c8", {"a": 8, "b": 9}, 20.0, 21.0),
        ],
        loads=[
            load("l1", "a", [1], 1.5, 1.8),
            load("l2", "a", [1, 2, 4], 5.1, 5.2),  # c3 still in flight: not yet seen is fine
            load("l3", "a", [1, 2, 4, 3], 5.5, 6.5),  # ... and seen before its answer, too
            load("l4", "b", [], 0.0, 0.5),
            load("l5", "b", [9], 21.5, 22.0),
        ],
        final={"a": final(1, 2, 4, 3, 6, 8), "b": final(9)},
    )


def test_a_correct_history_passes() -> None:
    assert check(correct_history()) == []


def test_a_timed_out_commit_may_be_absent_and_a_failed_one_present() -> None:
    history = correct_history()
    history.commits[5] = commit("c6", {"a": 6}, 7.0, 7.5, "failed")
    history.final["a"] = final(1, 2, 4, 3, 6, 8)
    assert check(history) == []
    history.final["a"] = final(1, 2, 4, 3, 8)
    assert check(history) == []


def test_a_lost_ack_is_rejected() -> None:
    history = correct_history()
    history.loads = []  # the loads saw c2 (2), so they would report it too
    history.final["a"] = final(1, 4, 3, 6, 8)
    assert kinds(history) == ["lost ack"]


def test_a_duplicated_snapshot_is_rejected() -> None:
    history = correct_history()
    history.final["a"] = final(1, 2, 4, 3, 3, 6, 8)
    assert kinds(history) == ["duplicated snapshot", "duplicated snapshot"]  # in main and the list


def test_a_commit_answered_409_that_is_present_is_rejected() -> None:
    history = correct_history()
    history.final["a"] = final(1, 2, 4, 3, 6, 5, 8)
    assert kinds(history) == ["409'd commit present"]


def test_an_order_contradicting_real_time_is_rejected() -> None:
    history = correct_history()
    history.loads = []
    history.final["a"] = final(2, 1, 4, 3, 6, 8)  # c1 completed at 1.0, c2 invoked at 2.0
    assert kinds(history) == ["order contradicts real time"]


def test_a_timed_out_transaction_on_one_of_its_tables_only_is_rejected() -> None:
    history = correct_history()
    history.commits.append(commit("c10", {"a": 10, "b": 11}, 30.0, None, "timeout"))
    history.final["a"] = final(1, 2, 4, 3, 6, 8, 10)
    assert kinds(history) == ["half there"]


def test_a_timed_out_commit_as_a_snapshot_off_main_is_rejected() -> None:
    history = correct_history()
    history.final["b"] = final(9, off_main=[7])
    assert kinds(history) == ["half there"]


def test_a_snapshot_no_client_committed_is_rejected() -> None:
    history = correct_history()
    history.final["b"] = final(9, 99)
    assert kinds(history) == ["unknown snapshot"]


def test_a_snapshot_log_that_is_not_main_is_rejected() -> None:
    history = correct_history()
    history.final["b"] = FinalTable(chain=[9], snapshots=[9], snapshot_log=[])
    assert kinds(history) == ["snapshot log"]


def test_a_load_missing_an_earlier_ack_is_rejected() -> None:
    history = correct_history()
    history.loads.append(load("l6", "a", [1], 3.5, 3.6))  # c2 was acknowledged at 3.0
    assert kinds(history) == ["stale read"]


def test_a_load_lagging_within_the_promised_staleness_passes_and_beyond_it_is_rejected() -> None:
    """l6 misses c2 (acknowledged at 3.0) at 3.5: linearizable reads forbid it; reads promised at
    most 1 s stale allow it, and then measure 0.5 s of lag; at 4.5 even those forbid it."""
    history = correct_history()
    history.loads.append(load("l6", "a", [1], 3.5, 3.6))
    history.read_staleness = 1.0
    assert check(history) == []
    assert worst_staleness(history) == pytest.approx(0.5)
    history.loads[-1] = load("l6", "a", [1], 4.5, 4.6)
    assert kinds(history) == ["stale read"]


def test_loads_lagging_within_the_staleness_still_need_one_order() -> None:
    """l3 saw c3 (before its acknowledgement at 6.0) and completed at 5.6. A load promised at
    most 0.5 s stale may miss c3 if it began by 6.1 (it may take effect before l3 did); one that
    began later must see c3, though c3's acknowledgement is less than 0.5 s old."""
    history = correct_history()
    history.read_staleness = 0.5
    history.loads[2] = load("l3", "a", [1, 2, 4, 3], 5.5, 5.6)
    history.loads.append(load("l6", "a", [1, 2, 4], 6.05, 6.1))
    assert check(history) == []
    history.loads[-1] = load("l6", "a", [1, 2, 4], 6.15, 6.2)
    assert kinds(history) == ["no single order"]


def test_a_load_seeing_another_history_is_rejected() -> None:
    history = correct_history()
    history.loads.append(load("l6", "a", [1, 4], 5.5, 5.6))
    assert kinds(history) == ["load saw another history"]


def test_a_load_seeing_less_than_an_earlier_load_is_rejected() -> None:
    """l3 saw c3 (3) before c3 was acknowledged (at 6.0); l6, invoked after l3 completed, does not:
    no stale read by the acknowledgements alone, but no single order puts c3 before l3 and after
    l6."""
    history = correct_history()
    history.loads[2] = load("l3", "a", [1, 2, 4, 3], 5.5, 5.6)
    history.loads.append(load("l6", "a", [1, 2, 4], 5.7, 5.8))
    assert kinds(history) == ["no single order"]


def test_transactions_ordered_differently_on_two_tables_are_rejected() -> None:
    """Per table each order is fine (the two transactions overlap in time); together they form a
    cycle: t1 before t2 on a, t2 before t1 on b."""
    history = History(
        seed=2,
        commits=[
            commit("t1", {"a": 1, "b": 2}, 0.0, 2.0),
            commit("t2", {"a": 3, "b": 4}, 0.5, 2.5),
        ],
        final={"a": final(1, 3), "b": final(4, 2)},
    )
    assert kinds(history) == ["no single order"]
    history.final["b"] = final(2, 4)
    assert check(history) == []


def test_two_commits_adding_one_snapshot_make_a_malformed_history() -> None:
    history = correct_history()
    history.commits.append(commit("c11", {"a": 1}, 40.0, 41.0, "conflict"))
    assert "history" in kinds(history)


@pytest.mark.parametrize("broken", [False, True])
def test_a_recorded_history_replays_from_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: bool
) -> None:
    history = correct_history()
    if broken:
        history.loads = []
        history.final["a"] = final(1, 4, 3, 6, 8)
    history.read_staleness = 0.25
    path = tmp_path / "history.json"
    path.write_text(history.to_json())
    assert History.from_json(path.read_text()) == history
    assert main([str(path)]) == (1 if broken else 0)
    out = capsys.readouterr().out
    assert ("lost ack: a: acknowledged c2 (2) is not in main" in out) is broken
    assert f"{1 if broken else 0} violations" in out
