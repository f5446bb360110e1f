"""Real small filesystems for tests of what happens when a disk is full or read-only.

`SmallDisk` mounts a tmpfs of a few hundred KiB (root only: CI runs the suite as root). A test
that needs one fails, never skips, when mounting is not permitted: the behaviour it checks would
otherwise go untested without anyone noticing.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

_FILLER = "filler.bin"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)


def _mount_tmpfs(where: Path, options: str) -> None:
    done = _run("mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where))
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs at {where} (uid {os.getuid()}): {done.stderr.strip()}. These tests "
            "need root (CAP_SYS_ADMIN) to fill a real filesystem; run the suite as root, as CI does."
        )


class SmallDisk:
    """A tmpfs of `size_kib` KiB mounted at `root`, which can be filled, emptied, and covered by
    a read-only filesystem."""

    def __init__(self, root: Path, size_kib: int = 256) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        _mount_tmpfs(root, f"size={size_kib}k,mode=0755")
        self._covered: list[Path] = []

    def fill(self) -> None:
        """Write a file until the filesystem has no room left (ENOSPC)."""
        chunk = b"\0" * 4096
        with (self.root / _FILLER).open("ab", buffering=0) as filler:
            try:
                while True:
                    filler.write(chunk)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
        # Smaller writes take what is left in the last page.
        with (self.root / _FILLER).open("ab", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0")
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise

    def free(self) -> None:
        """Remove what `fill` wrote."""
        (self.root / _FILLER).unlink()

    def cover_read_only(self, directory: Path) -> None:
        """Mount an empty read-only tmpfs over `directory` (inside this disk): its files are out of
        reach at their paths, and nothing can be created there, until `uncover`."""
        _mount_tmpfs(directory, "ro,size=16k")
        self._covered.append(directory)

    def uncover(self) -> None:
        directory = self._covered.pop()
        done = _run("umount", str(directory))
        assert done.returncode == 0, done.stderr

    def unmount(self) -> None:
        """Unmount (lazily: a process that still holds a file lets go when it exits)."""
        while self._covered:
            _run("umount", "-l", str(self._covered.pop()))
        done = _run("umount", "-l", str(self.root))
        assert done.returncode == 0, done.stderr
