"""A determining policy shown in its file: the file's lines around it, the policy's own marked.

The explanation names each determining policy by id and location (`FILE:LINE`, the line of its
first annotation or effect: `authz.loader`). The policy's lines run from there to the line of the
`;` that ends its statement, found with the loader's own statement splitter, so the lines marked
are exactly those the loader compiled as that policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from cedarberg.gateway.authz.loader import split_statements

CONTEXT_LINES: Final = 4  # lines shown before and after the policy (its comments, its neighbours)


@dataclass(frozen=True, slots=True)
class SourceLine:
    number: int
    text: str
    marked: bool  # one of the policy's lines


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Where a determining policy is and the lines shown for it (empty: the file is not known)."""

    policy_id: str
    file: str | None
    first: int | None  # the policy's first and last line in its file
    last: int | None
    lines: tuple[SourceLine, ...]


def policy_lines(text: str, line: int) -> tuple[int, int] | None:
    """The first and last line of the statement of `text` whose first code line is `line`."""
    for statement in split_statements(text):
        if statement.line == line:
            return line, statement.first_line + statement.text.count("\n")
    return None


def _location(location: str | None) -> tuple[str, int] | None:
    if not location:
        return None
    file, sep, line = location.rpartition(":")
    return (file, int(line)) if sep and file and line.isdigit() else None


def policy_source(policy_id: str, location: str | None, sources: Mapping[str, str]) -> PolicySource:
    """`policy_id` at `location` (`FILE:LINE`) in `sources` (file name -> text of the policy set
    that decided): the policy's lines marked, with `CONTEXT_LINES` around them. Without the
    file (a location or a set that is not the one that decided) no lines are shown."""
    where = _location(location)
    text = sources.get(where[0]) if where is not None else None
    span = policy_lines(text, where[1]) if where is not None and text is not None else None
    if where is None or text is None or span is None:
        return PolicySource(policy_id, where[0] if where else None, None, None, ())
    first, last = span
    lines = text.split("\n")
    start, end = max(1, first - CONTEXT_LINES), min(len(lines), last + CONTEXT_LINES)
    shown = tuple(SourceLine(n, lines[n - 1], first <= n <= last) for n in range(start, end + 1))
    return PolicySource(policy_id, where[0], first, last, shown)
