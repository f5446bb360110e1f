"""Planning reads and returns only the table's own files.

A table's metadata is written by its engines, so a manifest list or manifest path in it may name
any file (another table's manifests, files outside the warehouse). The planner reads through
`ConfinedFileIO`, which opens nothing outside the table's roots, and `check_tasks` fails a plan
that would hand out a data or delete file outside them. Either is a ForbiddenError: the plan
fails with a clear error rather than answering part of the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.table import FileScanTask

from cedarberg.catalog import roots
from cedarberg.catalog.errors import ForbiddenError

OUTSIDE = "the table's metadata names a file outside its locations; it is not read or planned"


class ConfinedFileIO(FileIO):
    """A read-only FileIO that refuses every location outside `held` (normalised roots)."""

    def __init__(self, inner: FileIO, held: Sequence[str]) -> None:
        super().__init__(inner.properties)
        self._inner = inner
        self._held = tuple(held)

    def new_input(self, location: str) -> InputFile:
        """Raises ForbiddenError for a location outside the roots."""
        if not roots.within(location, self._held):
            raise ForbiddenError(OUTSIDE)
        return self._inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        """Planning never writes. Raises ForbiddenError."""
        raise ForbiddenError("planning does not write files")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        """Planning never deletes. Raises ForbiddenError."""
        raise ForbiddenError("planning does not delete files")


def check_tasks(tasks: Iterable[FileScanTask], held: Sequence[str]) -> None:
    """Raise ForbiddenError if a task names a data or delete file outside the roots `held`."""
    for task in tasks:
        paths = [task.file.file_path, *(delete.file_path for delete in task.delete_files)]
        if not all(roots.within(path, held) for path in paths):
            raise ForbiddenError(OUTSIDE)
