"""What registering a metadata file (registerTable, registerView) must not do: bring back a
dropped object, duplicate a live one, or point the gateway at files of another object.

Undrop is the only way back for a dropped object: its parked files (`cedarberg-dropped/`) and its
UUID stay its own until it is purged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from cedarberg.catalog import json_nesting, locations, roots
from cedarberg.catalog.context import Warehouse
from cedarberg.catalog.dropped import PARKING_DIR
from cedarberg.catalog.errors import AlreadyExistsError, InvalidRequestError, LocationNotAllowedError
from cedarberg.catalog.store import roots as rows
from cedarberg.catalog.store.sql import StoreTx

T = TypeVar("T")


def check_file(warehouse: Warehouse, metadata_location: str) -> str:
    """The normalised location of a file to register. Raises LocationNotAllowedError if it lies
    outside the warehouse or in any object's dropped area."""
    location = locations.require_within(metadata_location, warehouse.location, "metadata-location")
    if PARKING_DIR in location.split("/"):
        raise LocationNotAllowedError(
            f"metadata-location lies in a dropped object's area ({PARKING_DIR}/): undrop it instead"
        )
    return location


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


async def check_uuid(tx: StoreTx, uuid: str) -> None:
    """Raise AlreadyExistsError if a live or dropped table or view has this UUID."""
    if await rows.uuid_in_use(tx, uuid):
        raise AlreadyExistsError(
            f"a table or view with UUID {uuid} exists or was dropped: undrop it rather than register it"
        )
