"""Iceberg's single-value JSON representation of values in their internal form (as partition
tuples hold them and as `pyiceberg.conversions.from_bytes` decodes column bounds)."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    FixedType,
    IcebergType,
    PrimitiveType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)

JsonValue = bool | int | float | str | None


def to_json(iceberg_type: IcebergType, value: Any) -> JsonValue:
    """`value` of `iceberg_type` as single-value JSON (None stays None: a null partition)."""
    if value is None:
        return None
    if isinstance(iceberg_type, DateType):
        return (_EPOCH_DATE + dt.timedelta(days=int(value))).isoformat()
    if isinstance(iceberg_type, TimeType):
        return (_EPOCH + dt.timedelta(microseconds=int(value))).time().isoformat(timespec="microseconds")
    if isinstance(iceberg_type, (TimestampType, TimestamptzType)):
        text = (_EPOCH + dt.timedelta(microseconds=int(value))).isoformat(timespec="microseconds")
        return text + "+00:00" if isinstance(iceberg_type, TimestamptzType) else text
    if isinstance(iceberg_type, (TimestampNanoType, TimestamptzNanoType)):
        seconds, nanos = divmod(int(value), 1_000_000_000)
        text = (_EPOCH + dt.timedelta(seconds=seconds)).isoformat(timespec="seconds") + f".{nanos:09d}"
        return text + "+00:00" if isinstance(iceberg_type, TimestamptzNanoType) else text
    if isinstance(iceberg_type, DecimalType):
        return str(Decimal(value).quantize(Decimal(1).scaleb(-iceberg_type.scale)))
    if isinstance(iceberg_type, UUIDType):
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))
    if isinstance(iceberg_type, (BinaryType, FixedType)):
        return bytes(value).hex().upper()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or infinity; a bound that is one says nothing useful
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def bound_to_json(iceberg_type: IcebergType, raw: bytes) -> JsonValue:
    """A column bound (Iceberg's binary single-value form) as single-value JSON."""
    if not isinstance(iceberg_type, PrimitiveType):
        return None
    return to_json(iceberg_type, from_bytes(iceberg_type, raw))
