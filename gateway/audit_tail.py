"""Read the audit file from its end: the newest records first, however large the file.

    for record in records_from_end(Path("/var/log/cedarberg/audit.jsonl"), max_bytes=256 * 1024**2):
        ...                                   # decoded audit records, newest first

The file is the one `gateway.audit_file` appends to (JSON lines; other processes and workers may
append while it is read; logrotate may rename it). What is read is fixed when reading starts: the
file open then (a rotation after that does not disturb it), up to its size then.

Promises:
- **Bounded**: at most `max_bytes` are read, from the end backwards in blocks of `block_bytes`;
  memory holds one block and the line being assembled (a line is at most `max_bytes`).
- **Only whole lines**: the text after the last newline (a line still being written) and the line
  cut by the `max_bytes` bound are never yielded; empty lines are skipped.
- `records_from_end` yields decoded JSON objects and skips lines that are not JSON objects (the
  file may be shared with something else), counting them in `TailState.unreadable_lines`;
  `TailState.bound_reached` says whether reading stopped at the `max_bytes` bound rather than at
  the file's start.

Only the file at the path is read, not its rotated predecessors. Raises OSError when the file
cannot be opened (FileNotFoundError when there is none).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

DEFAULT_BLOCK_BYTES: Final = 64 * 1024


@dataclass(slots=True)
class TailState:
    """What reading from the end met: lines that were not JSON objects, and whether it reached
    the `max_bytes` bound before the file's start."""

    unreadable_lines: int = 0
    bound_reached: bool = False


def lines_from_end(
    path: Path, max_bytes: int, block_bytes: int = DEFAULT_BLOCK_BYTES, state: TailState | None = None
) -> Iterator[bytes]:
    """The complete, non-empty lines of the file at `path`, newest first (see the module
    docstring); `state.bound_reached` is set when the bound ends them. Raises OSError when the
    file cannot be opened or read."""
    with path.open("rb") as file:
        end = os.fstat(file.fileno()).st_size
        floor = max(0, end - max(0, max_bytes))
        position = end
        partial = b""  # the start of the line being assembled (its beginning not read yet)
        tail_dropped = False  # the text after the last newline has been set aside
        while position > floor:
            size = min(block_bytes, position - floor)
            position -= size
            file.seek(position)
            block = file.read(size)
            if len(block) != size:
                raise OSError(f"{path} was truncated while it was read")
            pieces = (block + partial).split(b"\n")
            partial = pieces[0]
            complete = pieces[1:]
            if not tail_dropped:
                if not complete:
                    continue  # no newline yet: all of it is the unfinished last line
                complete = complete[:-1]  # after the last newline: "" or a line being written
                tail_dropped = True
            for line in reversed(complete):
                if line:
                    yield line
        if position == 0 and tail_dropped and partial:
            yield partial  # the file's first line, read whole
        if position > 0 and state is not None:
            state.bound_reached = True


def records_from_end(
    path: Path, max_bytes: int, state: TailState | None = None, block_bytes: int = DEFAULT_BLOCK_BYTES
) -> Iterator[dict[str, Any]]:
    """The audit records of the file at `path`, newest first: `lines_from_end`, decoded; lines
    that are not JSON objects are counted in `state`. Raises OSError like `lines_from_end`."""
    for line in lines_from_end(path, max_bytes, block_bytes, state):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            yield record
        elif state is not None:
            state.unreadable_lines += 1
