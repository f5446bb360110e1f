"""A metadata file that cannot be written whole is not left behind: on a real full filesystem (a
small tmpfs), the write fails with the operating system's reason and no partial file remains."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cedarberg.catalog import fileio
from cedarberg.catalog.errors import StorageUnavailableError
from tests.support.tmpfs import SmallDisk

DOCUMENT = b'{"format-version": 2, "padding": "' + b"x" * 64 * 1024 + b'"}'


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    small = SmallDisk(tmp_path / "disk", size_kib=256)
    yield small
    small.unmount()


def test_a_write_that_runs_out_of_space_leaves_no_file(disk: SmallDisk) -> None:
    directory = disk.root / "t" / "metadata"
    fileio.write_new_file((directory / "00000-a.metadata.json").as_uri(), b"{}")
    disk.fill()
    target = directory / "00001-b.metadata.json"
    with pytest.raises(StorageUnavailableError) as refused:
        fileio.write_new_file(target.as_uri(), DOCUMENT)
    assert str(refused.value) == "cannot write to the warehouse: No space left on device"
    assert str(disk.root) not in str(refused.value)
    assert sorted(path.name for path in directory.iterdir()) == ["00000-a.metadata.json"]


def test_with_room_again_the_same_write_succeeds(disk: SmallDisk) -> None:
    target = disk.root / "t" / "metadata" / "00001-b.metadata.json"
    disk.fill()
    with pytest.raises(StorageUnavailableError):
        fileio.write_new_file(target.as_uri(), DOCUMENT)
    disk.free()
    fileio.write_new_file(target.as_uri(), DOCUMENT)
    assert target.read_bytes() == DOCUMENT
