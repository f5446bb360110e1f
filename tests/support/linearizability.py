"""A linearizability checker for table commits: recorded client histories in, violations out.

A history is what clients saw (each operation's invocation and completion on one monotonic clock,
its outcome) plus each table's final state. Commits only append: each commit adds one snapshot per
table it changes (snapshot ids chosen by the client, so a snapshot names its commit) on top of
`main`. The state of a table is therefore its `main` chain, and the order of that chain is the order
the catalog linearized the commits in. The checker, a set of pure functions, asks:

- every acknowledged commit is in the final chain of each of its tables exactly once ("lost ack");
- no snapshot appears twice, in a chain or in the table's snapshot list ("duplicated snapshot");
- nothing from a commit answered 409 is anywhere ("409'd commit present");
- a commit whose outcome the client does not know (timeout, 5xx, a broken connection) is on all
  of its tables or on none, and never as a snapshot outside `main` ("half there");
- no snapshot nobody committed, the snapshot log is the chain;
- the chain order agrees with real time: if A completed before B was invoked, A precedes B;
- every load saw a prefix of the final chain that contains every commit acknowledged before the
  load was invoked (or, for a system promising reads at most `read_staleness` seconds stale, that
  long before) and nothing invoked after it completed;
- one order exists for everything at once: the union of the chain orders, what each load saw and
  real time is acyclic (a cycle means no single order explains the history: e.g. a load that sees
  less than an earlier load, or two multi-table transactions ordered differently on two tables).

`python -m tests.support.linearizability FILE` checks a recorded history (JSON, as `History.to_json`
writes it) and exits 1 if it finds a violation.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Outcome = Literal["ack", "conflict", "failed", "timeout"]
OUTCOMES: tuple[Outcome, ...] = ("ack", "conflict", "failed", "timeout")


@dataclass(frozen=True)
class Commit:
    """One commit attempt: `snapshots` maps each table it changes to the snapshot id it adds.

    `completed` is None when the client never saw an answer (timeout): its effect may land at any
    time after `invoked`."""

    op: str
    client: int
    snapshots: Mapping[str, int]
    invoked: float
    completed: float | None
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True)
class Load:
    """One loadTable: the snapshot ids of `main`, oldest first, in the answer."""

    op: str
    client: int
    table: str
    observed: Sequence[int]
    invoked: float
    completed: float


@dataclass(frozen=True)
class FinalTable:
    """A table's final state: `main`'s chain (oldest first), every snapshot id in its snapshot
    list, and its snapshot log."""

    chain: Sequence[int]
    snapshots: Sequence[int]
    snapshot_log: Sequence[int]


@dataclass
class History:
    """What the clients saw. `read_staleness` (seconds) is how stale a load may be by the
    system's contract: 0 for linearizable loads; a gateway caching registry reads for a TTL
    promises only that a load sees every commit acknowledged that long before it was invoked
    (a load then behaves as if invoked `read_staleness` earlier). Commits are checked strictly."""

    seed: int
    commits: list[Commit] = field(default_factory=list)
    loads: list[Load] = field(default_factory=list)
    final: dict[str, FinalTable] = field(default_factory=dict)
    read_staleness: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> History:
        raw = json.loads(text)
        commits = [
            Commit(**{**c, "snapshots": {t: int(s) for t, s in c["snapshots"].items()}})
            for c in raw["commits"]
        ]
        loads = [Load(**{**lo, "observed": [int(s) for s in lo["observed"]]}) for lo in raw["loads"]]
        final = {name: FinalTable(**table) for name, table in raw["final"].items()}
        for commit in commits:
            if commit.outcome not in OUTCOMES:
                raise ValueError(f"commit {commit.op}: unknown outcome {commit.outcome!r}")
        staleness = float(raw.get("read_staleness", 0.0))
        return History(int(raw["seed"]), commits, loads, final, staleness)


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def _ended(commit: Commit) -> float:
    """By when the commit's effect had taken place: its answer's time if it was acknowledged or
    refused with 409; unknown (infinity) after a timeout or another failure, whose effect may land
    later (a server error may come from a proxy while the commit goes on behind it)."""
    if commit.completed is None or commit.outcome in ("timeout", "failed"):
        return math.inf
    return commit.completed


def check(history: History) -> list[Violation]:
    """Every violation of the properties in the module docstring, in a stable order."""
    found: list[Violation] = []
    owners = _owners(history.commits, found)
    for table, final in sorted(history.final.items()):
        found += _check_table(table, final, owners)
    found += _check_atomic(history)
    found += _check_loads(history, owners)
    if not found:  # a cycle is only worth finding when the simpler checks pass
        found += _check_one_order(history, owners)
    return found


def _owners(commits: Iterable[Commit], found: list[Violation]) -> dict[tuple[str, int], Commit]:
    owners: dict[tuple[str, int], Commit] = {}
    for commit in commits:
        for table, snapshot in commit.snapshots.items():
            if (table, snapshot) in owners:
                other = owners[(table, snapshot)].op
                found.append(Violation("history", f"{commit.op} and {other} both add {snapshot} to {table}"))
            owners[(table, snapshot)] = commit
    return owners


def _check_table(table: str, final: FinalTable, owners: Mapping[tuple[str, int], Commit]) -> list[Violation]:
    found = []
    for where, ids in (("main", final.chain), ("the snapshot list", final.snapshots)):
        for snapshot, count in sorted(Counter(ids).items()):
            if count > 1:
                found.append(
                    Violation("duplicated snapshot", f"{table}: {snapshot} is {count} times in {where}")
                )
    if list(final.snapshot_log) != list(final.chain):
        found.append(Violation("snapshot log", f"{table}: log {list(final.snapshot_log)} is not main"))
    in_chain = set(final.chain)
    for snapshot in sorted(set(final.snapshots) | in_chain):
        commit = owners.get((table, snapshot))
        if commit is None:
            found.append(
                Violation("unknown snapshot", f"{table}: {snapshot} was added by no recorded commit")
            )
        elif commit.outcome == "conflict":
            found.append(
                Violation("409'd commit present", f"{table}: {commit.op} ({snapshot}) was answered 409")
            )
        elif snapshot not in in_chain:
            found.append(Violation("half there", f"{table}: {commit.op} ({snapshot}) is a snapshot off main"))
    for (owner_table, snapshot), commit in sorted(owners.items()):
        if owner_table == table and commit.outcome == "ack" and snapshot not in in_chain:
            found.append(
                Violation("lost ack", f"{table}: acknowledged {commit.op} ({snapshot}) is not in main")
            )
    found += _check_real_time(table, final.chain, owners)
    return found


def _check_real_time(
    table: str, chain: Sequence[int], owners: Mapping[tuple[str, int], Commit]
) -> list[Violation]:
    """Each commit in the chain must not follow one that was invoked after it completed (409'd
    commits in the chain are reported as such, not again here)."""
    commits = [owners[(table, s)] for s in chain if (table, s) in owners]
    commits = [commit for commit in commits if commit.outcome != "conflict"]
    found = []
    # earliest[i]: the later-in-chain commit that completed first, from position i on.
    earliest: list[Commit | None] = [None] * (len(commits) + 1)
    for i in range(len(commits) - 1, -1, -1):
        best = earliest[i + 1]
        earliest[i] = commits[i] if best is None or _ended(commits[i]) < _ended(best) else best
    for i, commit in enumerate(commits):
        later = earliest[i + 1]
        if later is not None and _ended(later) < commit.invoked:
            found.append(
                Violation(
                    "order contradicts real time",
                    f"{table}: {later.op} completed at {later.completed} before {commit.op} was invoked "
                    f"at {commit.invoked}, yet follows it in main",
                )
            )
    return found


def _check_atomic(history: History) -> list[Violation]:
    """A multi-table commit is on all of its tables or on none."""
    found = []
    chains = {table: set(final.chain) for table, final in history.final.items()}
    for commit in history.commits:
        present = sorted(t for t, s in commit.snapshots.items() if s in chains.get(t, ()))
        if present and len(present) < len(commit.snapshots):
            missing = sorted(set(commit.snapshots) - set(present))
            found.append(
                Violation(
                    "half there", f"{commit.op} ({commit.outcome}) is on {present} but not on {missing}"
                )
            )
    return found


@dataclass(frozen=True)
class _ChainIndex:
    """One table's final chain with what loads are checked against, each answer O(1):
    `earliest_ack_from[i]`, the acknowledged commit at position >= i that completed first;
    `latest_invoked_before[k]`, the commit among the first k that was invoked last."""

    chain: list[int]
    earliest_ack_from: list[Commit | None]
    latest_invoked_before: list[Commit | None]

    @staticmethod
    def build(table: str, chain: Sequence[int], owners: Mapping[tuple[str, int], Commit]) -> _ChainIndex:
        commits = [owners.get((table, snapshot)) for snapshot in chain]
        earliest: list[Commit | None] = [None] * (len(commits) + 1)
        for i in range(len(commits) - 1, -1, -1):
            commit, best = commits[i], earliest[i + 1]
            if commit is not None and commit.outcome == "ack":
                best = commit if best is None or _ended(commit) < _ended(best) else best
            earliest[i] = best
        latest: list[Commit | None] = [None] * (len(commits) + 1)
        for k, commit in enumerate(commits):
            best = latest[k]
            later = commit is not None and (best is None or commit.invoked > best.invoked)
            latest[k + 1] = commit if later else best
        return _ChainIndex(list(chain), earliest, latest)


def _check_loads(history: History, owners: Mapping[tuple[str, int], Commit]) -> list[Violation]:
    """Each load saw a prefix of the final chain, missed no commit acknowledged before it was
    invoked (less `read_staleness`), and saw no commit invoked after it completed."""
    found = []
    index = {table: _ChainIndex.build(table, final.chain, owners) for table, final in history.final.items()}
    for load in history.loads:
        chain = index.get(load.table)
        if chain is None:
            found.append(Violation("history", f"{load.op} loaded {load.table}, which has no final state"))
            continue
        seen = list(load.observed)
        if seen != chain.chain[: len(seen)]:
            found.append(Violation("load saw another history", f"{load.op}: {seen} is not a prefix of main"))
            continue
        missed = chain.earliest_ack_from[len(seen)]
        if missed is not None and _ended(missed) < load.invoked - history.read_staleness:
            detail = (
                f"{load.op} on {load.table} (invoked {load.invoked}) misses {missed.op}, "
                f"acknowledged at {missed.completed}"
            )
            found.append(Violation("stale read", detail))
        future = chain.latest_invoked_before[len(seen)]
        if future is not None and future.invoked > load.completed:
            detail = f"{load.op} saw {future.op}, invoked after it completed"
            found.append(Violation("read from the future", detail))
    return found


def worst_staleness(history: History) -> float:
    """The longest any load lagged behind an acknowledgement: max over loads of (invocation minus
    completion of the earliest acknowledged commit it did not see), 0 if none lagged."""
    owners = {(t, s): c for c in history.commits for t, s in c.snapshots.items()}
    index = {table: _ChainIndex.build(table, final.chain, owners) for table, final in history.final.items()}
    worst = 0.0
    for load in history.loads:
        chain = index.get(load.table)
        if chain is None or len(load.observed) > len(chain.chain):
            continue  # reported by check()
        missed = chain.earliest_ack_from[len(load.observed)]
        if missed is not None and missed.completed is not None:
            worst = max(worst, load.invoked - missed.completed)
    return worst


def _check_one_order(history: History, owners: Mapping[tuple[str, int], Commit]) -> list[Violation]:
    """Build the precedence graph (chain order, loads, real time) and look for a cycle.

    Real time is encoded without quadratically many edges: one node per completion, chained in
    time; an operation leads to its completion node, and the last completion before an operation
    was invoked leads to that operation. A path from A to B through these nodes exists exactly
    when A completed before B was invoked."""
    present = {commit.op for commit in history.commits if commit.outcome != "conflict"}
    ops: dict[str, tuple[float, float]] = {}
    for commit in history.commits:
        if commit.op in present:
            ops[commit.op] = (commit.invoked, _ended(commit))
    for load in history.loads:
        ops[load.op] = (load.invoked - history.read_staleness, load.completed)
    edges: dict[str, set[str]] = defaultdict(set)
    for table, final in history.final.items():
        chain_ops = [owners[(table, s)].op for s in final.chain if (table, s) in owners]
        for before, after in itertools.pairwise(chain_ops):
            edges[before].add(after)
    for load in history.loads:
        chain = history.final[load.table].chain
        seen = len(load.observed)
        if seen:
            edges[owners[(load.table, chain[seen - 1])].op].add(load.op)
        if seen < len(chain) and (load.table, chain[seen]) in owners:
            edges[load.op].add(owners[(load.table, chain[seen])].op)
    completions = sorted((end, op) for op, (_start, end) in ops.items() if end != math.inf)
    marks = [f"@{i}" for i in range(len(completions))]
    for i, (_end, op) in enumerate(completions):
        edges[op].add(marks[i])
        if i + 1 < len(marks):
            edges[marks[i]].add(marks[i + 1])
    ends = [end for end, _op in completions]
    for op, (start, _end) in ops.items():
        completed_before = _count_below(ends, start)
        if completed_before:
            edges[marks[completed_before - 1]].add(op)
    cycle = _find_cycle(edges)
    if cycle is None:
        return []
    named = [op for op in cycle if not op.startswith("@")]
    timed = ", ".join(f"{op} [{ops[op][0]:.6f}, {ops[op][1]:.6f}]" for op in named)
    return [Violation("no single order", f"these operations cannot be ordered: {timed}")]


def _count_below(sorted_values: Sequence[float], limit: float) -> int:
    """How many of `sorted_values` are strictly below `limit` (binary search)."""
    low, high = 0, len(sorted_values)
    while low < high:
        middle = (low + high) // 2
        if sorted_values[middle] < limit:
            low = middle + 1
        else:
            high = middle
    return low


def _find_cycle(edges: Mapping[str, set[str]]) -> list[str] | None:
    """A cycle of `edges` (its nodes in order), or None; iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in sorted(edges):
        if root in state:
            continue
        path = [root]
        stack = [iter(sorted(edges.get(root, ())))]
        state[root] = 1
        while stack:
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(following) == 1:
                return path[path.index(following) :]
            elif following not in state:
                state[following] = 1
                path.append(following)
                stack.append(iter(sorted(edges.get(following, ()))))
    return None


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.linearizability HISTORY.json", file=sys.stderr)
        return 2
    history = History.from_json(Path(argv[0]).read_text())
    violations = check(history)
    counts = Counter(c.outcome for c in history.commits)
    print(
        f"seed {history.seed}: {len(history.commits)} commits ({dict(sorted(counts.items()))}), "
        f"{len(history.loads)} loads, {len(history.final)} tables, reads at most "
        f"{history.read_staleness} s stale: {len(violations)} violations"
    )
    for violation in violations:
        print(f"  {violation}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
