"""Progress while the pipeline runs, and its final summary.

Each stage runs inside ``report.stage(name)``: its lines are printed at once, prefixed with the
elapsed seconds and the stage, and the stage's result (ok / FAILED / skipped, seconds) is kept.
``report.decision(...)`` records what the gateway decided for a request the pipeline made, as
the pipeline saw it: ``allowed``, ``denied`` (403 ``ForbiddenException``) or ``hidden`` (404: the
caller may not know the resource exists). ``report.summary(tables)`` prints the tables (rows,
snapshots), the stages and the decisions; ``report.ok`` is false if any stage failed.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

__all__ = ["Decision", "Report", "StageFailedError", "StageResult", "TableStats"]

OUTCOMES = ("allowed", "denied", "hidden")


@dataclass(frozen=True)
class Decision:
    principal: str
    operation: str
    target: str
    outcome: str  # one of OUTCOMES
    detail: str = ""


@dataclass
class StageResult:
    name: str
    status: str = "skipped"  # ok | FAILED | skipped
    seconds: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class TableStats:
    name: str
    kind: str  # table | view
    rows: int | None
    snapshots: int | None


class StageFailedError(RuntimeError):
    """A check inside a stage did not hold (the message says which)."""


@dataclass
class Report:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    started: float = field(default_factory=time.monotonic)
    stages: list[StageResult] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    _current: str = "pipeline"

    @property
    def ok(self) -> bool:
        return all(stage.status == "ok" for stage in self.stages)

    @property
    def failed(self) -> bool:
        return any(stage.status == "FAILED" for stage in self.stages)

    def line(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {self._current:<9} {message}", file=self.out, flush=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage; an exception marks it FAILED (printed, not raised): the caller skips the
        stages that depend on it (see `skip`)."""
        result = StageResult(name)
        self.stages.append(result)
        self._current = name
        began = time.monotonic()
        self.line("started")
        try:
            yield
        except Exception as err:
            result.status = "FAILED"
            result.error = f"{type(err).__name__}: {err}".splitlines()[0][:500]
            self.line(f"FAILED: {result.error}")
            if not isinstance(err, StageFailedError):
                traceback.print_exc(limit=6, file=sys.stderr)
        else:
            result.status = "ok"
        finally:
            result.seconds = time.monotonic() - began
            if result.status == "ok":
                self.line(f"done in {result.seconds:.1f}s")

    def skip(self, name: str, why: str = "an earlier stage failed") -> None:
        self.stages.append(StageResult(name))
        self._current = name
        self.line(f"skipped ({why})")

    def decision(self, principal: str, operation: str, target: str, outcome: str, detail: str = "") -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.decisions.append(Decision(principal, operation, target, outcome, detail))

    def summary(self, tables: list[TableStats]) -> None:
        total = time.monotonic() - self.started
        out = self.out
        print("", file=out)
        print("=" * 78, file=out)
        print(f"pipeline {'OK' if self.ok else 'FAILED'} in {total:.1f}s", file=out)
        print("", file=out)
        print(f"  {'stage':<10} {'status':<8} {'seconds':>8}", file=out)
        for stage in self.stages:
            suffix = f"  {stage.error}" if stage.error else ""
            print(f"  {stage.name:<10} {stage.status:<8} {stage.seconds:8.1f}{suffix}", file=out)
        if tables:
            print("", file=out)
            print(f"  {'table / view':<40} {'rows':>10} {'snapshots':>10}", file=out)
            for table in tables:
                rows = "-" if table.rows is None else f"{table.rows:,}"
                snaps = "-" if table.snapshots is None else str(table.snapshots)
                label = table.name + (" (view)" if table.kind == "view" else "")
                print(f"  {label:<40} {rows:>10} {snaps:>10}", file=out)
        print("", file=out)
        counts = Counter((d.principal, d.outcome) for d in self.decisions)
        print("  gateway decisions observed by the pipeline:", file=out)
        for principal in dict.fromkeys(d.principal for d in self.decisions):
            parts = ", ".join(f"{counts[(principal, o)]} {o}" for o in OUTCOMES if counts[(principal, o)])
            print(f"    {principal:<18} {parts}", file=out)
        for d in self.decisions:
            if d.outcome != "allowed":
                print(f"    {d.outcome.upper():<7} {d.principal}: {d.operation} {d.target}", file=out)
                if d.detail:
                    print(f"            {d.detail}", file=out)
        print("=" * 78, file=out, flush=True)
