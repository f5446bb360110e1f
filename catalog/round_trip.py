"""Whether metadata a commit built in memory is exactly what parsing its JSON gives back.

A landed commit hands the metadata it built to `catalog.parsed_metadata`, so that the next
commit starts from it instead of parsing the stored JSON again. That is only right when the two
are the same model, and a few in-memory values are not what their JSON reads back as:

- format v1 table metadata is written without its snapshots' sequence numbers (pyiceberg's serialiser
  drops them), which parsing then reads as 0;
- a field holding None is left out of the JSON (`exclude_none`), which parsing then reads as the
  field's default when that default is not None, and refuses when the field is required (an
  `add-snapshot` sent with `"sequence-number": null` leaves the table's `last-sequence-number`
  None in memory, 0 once parsed).

Everything else pyiceberg's models serialise, they parse back to the same value (the round trip of
every update type is held by tests/catalog/test_parsed_metadata.py). So `round_trips` refuses v1
and any None whose field defaults to something else, looking only at what the commit changed: an
object shared with the metadata the commit started from (parsed, or kept after this same check)
has passed already, so the check costs what the change is, not what the table is.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pyiceberg.table.metadata import TableMetadataV1


def round_trips(new: BaseModel, origin: BaseModel | None) -> bool:
    """True if parsing the JSON of `new` gives `new` back, knowing that `origin` (the metadata the
    change started from; None: a new object) does."""
    if isinstance(new, TableMetadataV1):
        return False
    return _model_holds(new, origin)


def _model_holds(model: BaseModel, origin: BaseModel | None) -> bool:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name, None)  # never raises: a landed commit must not fail here
        if value is None:
            # Left out of the JSON: parsed back as the default, which must be None then (a
            # required field would not parse back at all).
            if info.default is not None or info.default_factory is not None:
                return False
            continue
        before = getattr(origin, name, None) if origin is not None else None
        if value is not before and not _value_holds(value, before):
            return False
    return True


def _value_holds(value: Any, before: Any) -> bool:
    """`value` (not shared with `before`, its counterpart in the origin) round-trips."""
    if isinstance(value, BaseModel):
        return _model_holds(value, before if type(before) is type(value) else None)
    if isinstance(value, list | tuple):
        if not isinstance(before, list | tuple):
            return all(_value_holds(item, None) for item in value)
        # Set operations in C over the ids: a commit appends an entry or two to logs of up to a
        # hundred, and those are looked for from the end.
        fresh = set(map(id, value)).difference(map(id, before))
        for item in reversed(value):
            if not fresh:
                break
            if id(item) in fresh:
                fresh.discard(id(item))
                if not _value_holds(item, None):
                    return False
        return True
    if isinstance(value, dict):
        old = before if isinstance(before, dict) else {}
        return all(item is old.get(key) or _value_holds(item, None) for key, item in value.items())
    return True
