"""Metadata files in the warehouse: write, read, delete, purge.

All calls block, so the service runs them in a worker thread. Files are created with
`overwrite=False`: a metadata file name is never reused, so a write can never clobber a file that
another commit already points at.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from cedarberg.catalog import locations
from cedarberg.catalog import roots as roots_
from cedarberg.catalog.errors import InvalidRequestError, NoFileError, StorageUnavailableError

log = logging.getLogger(__name__)


Properties = tuple[tuple[str, str], ...]

# FileIO properties (endpoint, region, keys) by warehouse root. Set once per process at start-up
# (`use_properties`), read by every `file_io` call: callers only ever pass a location.
_PROPERTIES: dict[str, Properties] = {}
_PROPERTIES_LOCK = threading.Lock()


def use_properties(root: str, properties: Mapping[str, str]) -> None:
    """Reach every location under `root` (a warehouse) with these FileIO properties."""
    with _PROPERTIES_LOCK:
        _PROPERTIES[locations.normalize(root).rstrip("/")] = tuple(sorted(properties.items()))


def _properties_for(norm: str) -> Properties:
    best, found = -1, Properties()
    for root, properties in _PROPERTIES.items():
        if (norm == root or norm.startswith(root + "/")) and len(root) > best:
            best, found = len(root), properties
    return found


@lru_cache(maxsize=64)
def _io_for(scheme_root: str, properties: Properties) -> FileIO:
    return load_file_io(properties=dict(properties), location=scheme_root)


def file_io(location: str) -> FileIO:
    """A FileIO able to reach `location`: one per scheme, bucket and warehouse settings, reused."""
    norm = locations.normalize(location)
    scheme, _, rest = norm.partition("://")
    return _io_for(f"{scheme}://{rest.split('/', 1)[0]}", _properties_for(norm))


def metadata_file_location(metadata: roots_.Placed, version: int) -> str:
    """Where version `version` of an object's metadata goes: `<dir>/NNNNN-<uuid>.metadata.json`,
    where `<dir>` is the `write.metadata.path` property (Iceberg's reference catalogs honour it;
    it is one of the object's roots), else `<location>/metadata`."""
    # The property is used as spelled, as the reference does (`file:/x` stays `file:/x`); it is
    # compared with the roots only after normalising, like every path.
    custom = metadata.properties.get(roots_.WRITE_METADATA_PATH)
    directory = custom or f"{locations.normalize(metadata.location).rstrip('/')}/metadata"
    return f"{directory.rstrip('/')}/{version:05d}-{uuid.uuid4()}.metadata.json"


def parse_metadata_version(metadata_location: str) -> int:
    """The version number encoded in a metadata file name, or -1 when it has none."""
    name = metadata_location.rsplit("/", 1)[-1]
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else -1


def write_new_file(location: str, content: bytes) -> None:
    """Create a file that must not exist yet. Raises StorageUnavailableError on any failure,
    naming the operating system's reason (e.g. "No space left on device"; never a path): the
    file is then not there, so nothing can point at it and nothing reads it later.

    A local file is durable when this returns: it and its directory entry are fsynced, so that a
    pointer swapped to it afterwards never names a file that power loss emptied or removed. (An
    object store's PUT is durable when acknowledged.)"""
    try:
        if location.startswith("file:"):
            _write_local_file(locations.to_local_path(location), content)
            return
        with file_io(location).new_output(location).create(overwrite=False) as out:
            out.write(content)
    except FileExistsError as err:
        raise StorageUnavailableError("metadata file name collision; retry") from err
    except (OSError, ValueError) as err:
        raise StorageUnavailableError(f"cannot write to the warehouse: {_reason(err)}") from err


def _reason(err: OSError | ValueError) -> str:
    """Why a write failed, as the operating system names its error number (no path, no
    message that could carry one); the exception's class when there is no number."""
    number = err.errno if isinstance(err, OSError) else None
    return os.strerror(number) if number else type(err).__name__


def _write_local_file(path: str, content: bytes) -> None:
    """Create `path` (never overwriting) with `content`, then fsync the file and every directory
    this call created or added an entry to. A file this call created and could not finish (a full
    disk, an I/O error) is removed again: a partial metadata file is never left where a rebuild or
    an operator would find it."""
    directory = os.path.dirname(path)
    created = _make_directories(directory)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):  # the failure to write is what the caller must hear of
            os.unlink(path)
        raise
    os.close(fd)
    for changed in [directory, *(os.path.dirname(d) for d in created)]:
        _fsync_directory(changed)


def _make_directories(directory: str) -> list[str]:
    """Create `directory` and missing parents; the ones created, deepest first."""
    created: list[str] = []
    current = directory
    while current and not os.path.isdir(current):
        created.append(current)
        current = os.path.dirname(current)
    for path in reversed(created):
        # Created concurrently by another commit: it exists, which is all this needs.
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
    return created


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(location: str, max_bytes: int) -> bytes:
    """Read a whole file of at most `max_bytes`. Raises NoFileError if there is no regular file
    there (nothing, a directory, a FIFO or a device: never opened, so a FIFO cannot block),
    InvalidRequestError if it is too big, StorageUnavailableError if it cannot be read."""
    try:
        if location.startswith("file:"):
            _require_regular_file(locations.to_local_path(location))
        with file_io(location).new_input(location).open() as stream:
            data = stream.read(max_bytes + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise NoFileError(f"no file at {location!r}") from None
    except OSError as err:
        raise StorageUnavailableError(f"cannot read from the warehouse: {type(err).__name__}") from err
    if len(data) > max_bytes:
        raise InvalidRequestError("metadata file is too large")
    return bytes(data)


def _require_regular_file(path: str) -> None:
    """Raise FileNotFoundError unless `path` is a regular file (following symbolic links)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise FileNotFoundError(path)


def move_file(source: str, target: str) -> None:
    """Move a file within the warehouse (a rename on local disk, copy-then-delete elsewhere).

    Raises StorageUnavailableError; a missing source is FileNotFoundError (already moved)."""
    try:
        if source.startswith("file:") and target.startswith("file:"):
            target_path = locations.to_local_path(target)
            os.makedirs(os.path.dirname(target_path), exist_ok=True)
            os.rename(locations.to_local_path(source), target_path)
            return
        with file_io(source).new_input(source).open() as stream:
            content = stream.read()
        with file_io(target).new_output(target).create(overwrite=True) as out:
            out.write(content)
        file_io(source).delete(source)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as err:
        raise StorageUnavailableError(f"cannot move a file in the warehouse: {type(err).__name__}") from err


def parse_table_metadata(content: bytes) -> TableMetadata:
    try:
        return TableMetadataUtil.parse_raw(content.decode())
    except ValueError as err:
        raise InvalidRequestError(f"not valid Iceberg table metadata: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0][:300]


def delete_files(paths: Iterable[str]) -> int:
    """Delete files, ignoring ones already gone. Returns how many were deleted."""
    deleted = 0
    for path in paths:
        try:
            file_io(path).delete(path)
            deleted += 1
        except FileNotFoundError:
            continue
        except OSError as err:
            log.warning("could not delete %s: %s", path, type(err).__name__)
    return deleted


def table_files(metadata: TableMetadata, metadata_location: str, roots: Sequence[str]) -> set[str]:
    """Every file a table's metadata references: metadata log, manifest lists, manifests, data
    and delete files, statistics. Only manifest lists and manifests under the table's `roots`
    are read (a path elsewhere is returned, for the caller to refuse, never opened). Unreadable
    manifests are skipped (and logged) so purge goes on."""
    files = {metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    files.update(stat.statistics_path for stat in metadata.statistics)
    files.update(stat.statistics_path for stat in metadata.partition_statistics)
    io = file_io(metadata.location)
    seen_manifests: set[str] = set()
    for snapshot in metadata.snapshots:
        files.add(snapshot.manifest_list)
        if not roots_.within(snapshot.manifest_list, roots):
            continue
        try:
            manifests = snapshot.manifests(io)
        # Engines write these files and a crafted one fails Avro decoding in any way (EOFError,
        # KeyError, ...): whatever the failure, the file is unreadable and purge goes on.
        except Exception as err:
            log.warning("purge: cannot read manifest list %s: %s", snapshot.manifest_list, type(err).__name__)
            continue
        for manifest in manifests:
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            files.add(manifest.manifest_path)
            if not roots_.within(manifest.manifest_path, roots):
                continue
            try:
                entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
            except Exception as err:  # as for the manifest list above
                log.warning("purge: cannot read manifest %s: %s", manifest.manifest_path, type(err).__name__)
                continue
            files.update(entry.data_file.file_path for entry in entries)
    return files


def remove_tree(location: str) -> None:
    """Remove a purged table's location: a local directory tree, or what is left under an object
    store prefix once its files are gone (pyarrow's empty directory markers)."""
    if location.startswith("file:"):
        shutil.rmtree(locations.to_local_path(location), ignore_errors=True)
        return
    io = file_io(location)
    if not isinstance(io, PyArrowFileIO):
        return
    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    try:
        io.fs_by_scheme(scheme, netloc).delete_dir(path)
    except FileNotFoundError:
        return
    except OSError as err:
        log.warning("could not remove %s: %s", location, type(err).__name__)
