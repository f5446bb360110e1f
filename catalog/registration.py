"""What registering a metadata file (registerTable, registerView) must not do: read a file that is
not the caller's, bring back a dropped object, duplicate a live one, or point the gateway at files
of another object.

The caller (authorized for the new object in its namespace before the handler runs) may have read
only files its namespace holds: `confine_file` decides that on the registry alone, before anything
is read, and every file it may not have read, or that is not there, gets one answer
(`NOT_REGISTRABLE`), so a registration maps nothing a catalog route would hide.

Undrop is the only way back for a dropped object: its parked files (`cedarberg-dropped/`) and its
UUID stay its own until it is purged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cedarberg.catalog import confinement, fileio, json_nesting, locations, roots
from cedarberg.catalog.context import CatalogContext, Warehouse
from cedarberg.catalog.errors import (
    InvalidRequestError,
    LocationNotAllowedError,
    NoFileError,
)
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.locations import PARKING_DIR
from cedarberg.catalog.lookups import TABLE, name_taken, require_namespace
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.store import roots as rows

# The one answer for a file outside the place the caller's namespace holds, inside another
# namespace's directory or another object's files, or not there at all: the answers cannot tell
# these apart, nor tell anything about a place the caller may not see.
NOT_REGISTRABLE = "metadata-location does not name a metadata file this namespace can register"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Target:
    """What a registration creates: a `kind` (table or view) at `identifier`, replacing the table
    there if `overwrite` (tables only)."""

    kind: str
    identifier: Identifier
    overwrite: bool = False


async def confine_file(
    ctx: CatalogContext, warehouse: Warehouse, target: Target, metadata_location: str
) -> str:
    """The normalised location of a metadata file to register as `target`, once the registry says
    the caller may have it read: it lies strictly inside the directory of the target's namespace
    (anywhere in the warehouse when `warehouse.allow_locations_outside_namespace`), in no other
    namespace's directory below or beside that one, in no other warehouse and in no other table's
    or view's roots, live or dropped (a table registered over the table at its name may read that
    table's files). Reads no file.

    Raises InvalidRequestError for a location that cannot be normalised, NoSuchNamespaceError,
    AlreadyExistsError (the name is taken and not to be overwritten, worded as Iceberg's reference
    catalog words it), LocationNotAllowedError (`NOT_REGISTRABLE`; a file in a dropped object's
    area, which only the namespace's own objects reach, is told to be undropped instead)."""
    location = locations.normalize(metadata_location)
    identifier = target.identifier
    namespace = identifier.namespace
    async with ctx.store.read() as tx:
        ns_properties = await require_namespace(tx, warehouse.name, namespace)
        existing = await object_rows.get_object(tx, warehouse.name, namespace.key, identifier.name)
        claims = await rows.near(tx, location)
    replaced_uuid = None
    if existing is not None:
        if not (target.overwrite and existing.kind == target.kind == TABLE):
            raise name_taken(identifier, existing.kind, target.kind)
        replaced_uuid = existing.uuid
    own = roots.namespace_directory(warehouse.location, namespace, ns_properties)
    others = [root for root in confinement.warehouse_roots(ctx) if root != warehouse.location]
    inside = roots.contains(own, location) and location != own
    if (
        not roots.contains(warehouse.location, location)
        or location == warehouse.location
        or any(roots.overlaps(root, location) for root in others)
        or not (inside or warehouse.allow_locations_outside_namespace)
        or not all(_leaves_readable(claim, location, own, replaced_uuid) for claim in claims)
    ):
        raise LocationNotAllowedError(NOT_REGISTRABLE)
    if PARKING_DIR in location.split("/"):
        raise LocationNotAllowedError(
            f"metadata-location lies in a dropped object's area ({PARKING_DIR}/): undrop it instead"
        )
    return location


def _leaves_readable(claim: rows.Claim, location: str, own: str, replaced_uuid: str | None) -> bool:
    """Whether a recorded root at, above or below `location` leaves the file readable for an
    object of the namespace whose directory is `own`."""
    if claim.kind != rows.NAMESPACE:
        return claim.kind == TABLE and claim.owner == replaced_uuid
    if roots.contains(location, claim.root):
        return False  # the file would be a namespace's directory or above one
    # A namespace's directory above the file: the file is the caller's only if that directory
    # is its own namespace's or one above it (a parent's), not another namespace's.
    return roots.contains(claim.root, own)


async def read_file(ctx: CatalogContext, location: str) -> bytes:
    """The content of the confined file at `location` (see `confine_file`). Raises
    LocationNotAllowedError (`NOT_REGISTRABLE`) if there is no regular file there,
    InvalidRequestError if it is too large, StorageUnavailableError."""
    try:
        return await asyncio.to_thread(fileio.read_file, location, ctx.limits.max_metadata_bytes)
    except NoFileError:
        raise LocationNotAllowedError(NOT_REGISTRABLE) from None


def read_metadata(content: bytes, parse: Callable[[bytes], T], kind: str) -> T:
    """The metadata a registered file holds, parsed by `parse`. The file is the client's, so it is
    read as a request is: its depth bounded before any parser recurses into it, and whatever the
    parser raises (pyiceberg's ValidationError for a `decimal(99,2)`, TypeError, ...) refused.
    Raises InvalidRequestError."""
    json_nesting.check_depth(content, json_nesting.MAX_METADATA_FILE_DEPTH, f"{kind} metadata file")
    try:
        return parse(content)
    except InvalidRequestError:
        raise
    except Exception as err:  # parsing is pure: any failure is the file's
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise InvalidRequestError(f"not valid Iceberg {kind} metadata: {first}") from None


def check_contents(location: str, held: Sequence[str], added: Iterable[str]) -> None:
    """Raise LocationNotAllowedError unless the registered file and every file its metadata adds
    (manifest lists, statistics) lie under the object's roots `held`."""
    if not roots.within(location, held):
        raise LocationNotAllowedError("metadata-location lies outside the location its metadata names")
    for path in added:
        if not roots.within(path, held):
            raise LocationNotAllowedError(f"file {path!r} lies outside the table's locations")
