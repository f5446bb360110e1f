"""An object's roots and the placement rule they obey (pure: no registry, no files).

A table's or view's *roots* are the places it may own files in: its location and, for a table,
the write paths engines honour (`write.data.path`, `write.metadata.path` and their older
spellings). Every root:
- is never a warehouse root and never contains one,
- lies inside an *object directory* of the object's namespace: a directory directly inside the
  namespace's directory (its `location` property, else `<warehouse>/<namespace levels>`) whose
  name ends in `-` and 32 lowercase hexadecimal digits (the default placement is
  `<namespace directory>/<name>-<uuid>`), unless the warehouse admits legacy layouts for
  migrations,
- and (checked against the registry by `catalog.confinement`) never overlaps another object's
  roots nor is or contains a namespace directory.

Why object directories: a namespace's default directory is `<warehouse>/<its levels>`, so any other
directory inside a namespace's directory is the default directory of a child namespace someone may
create later. No namespace may have a name whose path segment has the object-directory form
(`check_namespace_name`), so no namespace's default directory can ever be, or lie inside, an object's
roots: a writer cannot claim a future namespace's directory.

Everything the gateway reads, plans, signs, vends or deletes for an object must lie under its
roots (`within`). Locations are compared only after `locations.normalize`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

from pyiceberg.table.metadata import TableMetadata

from cedarberg.catalog import locations
from cedarberg.catalog.errors import InvalidRequestError, LocationNotAllowedError
from cedarberg.catalog.identifiers import Namespace

# Properties that point engines at other places to write. The last two are older spellings that
# Java's location providers still honour when the first is unset.
WRITE_METADATA_PATH = "write.metadata.path"
WRITE_PATH_PROPERTIES = (
    "write.data.path",
    WRITE_METADATA_PATH,
    "write.object-storage.path",
    "write.folder-storage.path",
)
NAMESPACE_LOCATION = "location"
# The name of an object directory, as a path segment (compared as written: percent-encoded
# spellings are other names). Lowercase only: it is what `uuid.UUID.hex` produces.
_OBJECT_DIRECTORY = re.compile(r"[^/]+-[0-9a-f]{32}")
# Namespace names are reserved in either case: on a filesystem that folds case (macOS, Windows), a
# namespace `T-<HEX>` and an object directory `t-<hex>` would be one directory.
_RESERVED_NAMESPACE = re.compile(r"[^/]+-[0-9a-f]{32}", re.IGNORECASE)


def object_directory_name(name: str, uid: str) -> str:
    """The name of the default directory of object `name` with UUID `uid` (any spelling
    `uuid.UUID` accepts): `<name>-<32 hex digits>`. `locations.segment` keeps the hyphen and the
    digits as they are, so its path segment is an object directory. Raises ValueError for a
    malformed UUID."""
    return f"{name}-{uuid.UUID(uid).hex}"


def is_object_directory(segment: str) -> bool:
    """True if a path segment (as written) has the form reserved for object directories."""
    return _OBJECT_DIRECTORY.fullmatch(segment) is not None


def check_namespace_name(level: str) -> None:
    """Raise InvalidRequestError if a namespace named `level` would have an object directory as
    its default directory (its path segment ends in `-` and 32 hex digits, in either case, so that
    a filesystem folding case cannot make them one): that form is reserved for tables and views, so
    objects can never take a future namespace's place."""
    if _RESERVED_NAMESPACE.fullmatch(locations.segment(level)) is not None:
        raise InvalidRequestError(
            f"namespace name {level!r} is reserved: names ending in '-' and 32 hexadecimal digits "
            "are the form of table and view directories"
        )


def object_roots(location: str, properties: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The normalised roots of an object at `location` with these (table) properties, sorted and
    without duplicates. Raises InvalidRequestError for a location that cannot be normalised."""
    found = {locations.normalize(location)}
    for key in WRITE_PATH_PROPERTIES:
        value = (properties or {}).get(key)
        if value:
            found.add(locations.normalize(value))
    return tuple(sorted(found))


class Placed(Protocol):
    """Table or view metadata: where the object lives and its properties."""

    @property
    def location(self) -> str: ...

    @property
    def properties(self) -> Mapping[str, str]: ...


def roots_of(metadata: Placed) -> tuple[str, ...]:
    """The roots of a table or view: its location and its write paths."""
    return object_roots(metadata.location, metadata.properties)


def namespace_directory(warehouse_location: str, namespace: Namespace, properties: Mapping[str, str]) -> str:
    """Where a namespace's objects live: its `location` property, else `<warehouse>/<levels>`."""
    explicit = properties.get(NAMESPACE_LOCATION)
    if explicit:
        return locations.normalize(explicit)
    return locations.join(warehouse_location, *namespace.levels)


def contains(outer: str, inner: str) -> bool:
    """True if normalised `inner` is `outer` or lies below it (both already normalised)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def overlaps(first: str, second: str) -> bool:
    """True if one normalised root contains the other."""
    return contains(first, second) or contains(second, first)


def first_segment_below(outer: str, inner: str) -> str:
    """The path segment of normalised `inner` directly below normalised `outer` (which must
    contain it and differ from it)."""
    return inner[len(outer) :].lstrip("/").split("/", 1)[0]


def within(path: str, roots: Iterable[str]) -> bool:
    """True if `path` (any spelling) lies under one of the normalised `roots`. A path that cannot
    be normalised lies nowhere."""
    try:
        norm = locations.normalize(path)
    except InvalidRequestError:
        return False
    return any(contains(root, norm) for root in roots)


def ancestors(root: str) -> list[str]:
    """`root` and every normalised location above it, up to the bucket (or `file:///`)."""
    scheme, _, rest = root.partition("://")
    parts = rest.split("/")
    if scheme == "file":  # file:///a/b -> rest "/a/b": the first part is empty
        return ["file:///"] + [f"file://{'/'.join(parts[: i + 1])}" for i in range(1, len(parts)) if parts[i]]
    return [f"{scheme}://{'/'.join(parts[: i + 1])}" for i in range(len(parts))]


def check_placement(
    candidates: Iterable[str],
    namespace_dir: str,
    warehouse_root: str,
    warehouse_roots: Iterable[str],
    allow_outside_namespace: bool,
) -> None:
    """Raise LocationNotAllowedError, naming the rule, unless every candidate root (normalised)
    lies inside its warehouse (`warehouse_root`), keeps clear of every warehouse root and lies
    inside an object directory directly inside `namespace_dir` (or, when `allow_outside_namespace`
    (legacy layouts, for migrations), anywhere in the warehouse that is not the namespace directory
    or above it)."""
    warehouses = [locations.normalize(root) for root in warehouse_roots]
    for root in candidates:
        if not contains(locations.normalize(warehouse_root), root):
            raise LocationNotAllowedError(f"location {root!r} is outside the warehouse {warehouse_root!r}")
        for warehouse in warehouses:
            if contains(root, warehouse):
                raise LocationNotAllowedError(
                    f"location {root!r} is or contains the warehouse root: "
                    "a table or view must have a location of its own"
                )
        if contains(root, namespace_dir):
            raise LocationNotAllowedError(
                f"location {root!r} is or contains the namespace directory {namespace_dir!r}: "
                "a table or view must have a location of its own"
            )
        if allow_outside_namespace:
            continue
        if not contains(namespace_dir, root):
            raise LocationNotAllowedError(
                f"location {root!r} is outside the namespace directory {namespace_dir!r}"
            )
        if not is_object_directory(first_segment_below(namespace_dir, root)):
            raise LocationNotAllowedError(
                f"location {root!r} is not inside a table or view directory of the namespace directory "
                f"{namespace_dir!r}: tables and views live in '<namespace directory>/<name>-<32 lowercase "
                "hexadecimal digits>', a directory no namespace can take"
            )


def new_roots(base: TableMetadata | None, new: TableMetadata) -> list[str]:
    """The roots `new` has that `base` (None: no table yet) did not."""
    return sorted(set(roots_of(new)) - set(roots_of(base) if base is not None else ()))


def added_paths(base: TableMetadata | None, new: TableMetadata) -> list[str]:
    """The files `new` names that `base` did not: manifest lists of added snapshots, statistics
    and partition statistics files."""
    old_snapshots = {snap.snapshot_id for snap in base.snapshots} if base is not None else set()
    old_files = set()
    if base is not None:
        old_files = {stat.statistics_path for stat in (*base.statistics, *base.partition_statistics)}
    found = [snap.manifest_list for snap in new.snapshots if snap.snapshot_id not in old_snapshots]
    found += [
        stat.statistics_path
        for stat in (*new.statistics, *new.partition_statistics)
        if stat.statistics_path not in old_files
    ]
    return found


def check_added_paths(base: TableMetadata | None, new: TableMetadata) -> None:
    """Raise LocationNotAllowedError if `new` adds a file outside the table's roots (before or
    after the change): the gateway would otherwise read, sign or delete it for this table."""
    allowed = set(roots_of(new)) | (set(roots_of(base)) if base is not None else set())
    for path in added_paths(base, new):
        if not within(path, allowed):
            raise LocationNotAllowedError(f"file {path!r} lies outside the table's locations")
